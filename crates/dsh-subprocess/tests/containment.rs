//! Containment: no descendant outlives its tree, however it tried to escape (own binary: it
//! makes the test process a child subreaper). Each test scans `/proc` for its own markers
//! only, since tests share the process.

use std::time::Duration;

use dsh_subprocess::{SpawnSpec, SubprocessService};

use dsh_test_support::escape;
use tokio_util::sync::CancellationToken;

fn bash(script: &str) -> SpawnSpec {
    let mut spec = SpawnSpec::new(vec!["bash".into(), "-c".into(), script.into()]);
    spec.grace = Duration::from_millis(200);
    spec
}

#[tokio::test]
async fn containment_is_a_subreaper_by_default() {
    let service = SubprocessService::new();
    assert_eq!(
        service.containment().to_string(),
        "subreaper (stray descendants are adopted and killed; opt out with DSH_DETACH=1 and setsid)"
    );
}

#[tokio::test]
async fn escapes_die_when_the_leader_ends_normally() {
    let service = SubprocessService::new();
    let marker = escape::marker();
    let handle = service.spawn(bash(&escape::script(&marker, "echo armed"))).expect("spawn");
    let outcome = handle.wait().await;
    assert_eq!(outcome.exit_code, Some(0), "{}", handle.stderr().collected().text);
    assert_eq!(handle.stdout().collected().text, "armed\n");
    escape::assert_no_survivors(&marker).await;
}

#[tokio::test]
async fn escapes_die_when_the_tree_is_aborted() {
    let service = SubprocessService::new();
    let marker = escape::marker();
    let signal = CancellationToken::new();
    let mut spec = bash(&escape::script(&marker, "echo armed; sleep 1000"));
    spec.cancel = Some(signal.clone());
    let handle = service.spawn(spec).expect("spawn");
    handle.stdout().wait_for_total(1).await;
    assert_eq!(handle.stdout().read_from(0).text, "armed\n");
    assert_eq!(escape::survivors(&marker).len(), escape::CASES);
    signal.cancel();
    assert_eq!(handle.wait().await.signal.as_deref(), Some("SIGTERM"));
    escape::assert_no_survivors(&marker).await;
}

#[tokio::test]
async fn escapes_die_at_disposal() {
    let service = SubprocessService::new();
    let marker = escape::marker();
    let handle = service.spawn(bash(&escape::script(&marker, "echo armed; sleep 1000"))).expect("spawn");
    handle.stdout().wait_for_total(1).await;
    assert_eq!(escape::survivors(&marker).len(), escape::CASES);
    service.dispose().await;
    // Disposal resolves after the strays were reaped: no waiting needed.
    assert_eq!(escape::survivors(&marker), Vec::<i32>::new());
}

#[tokio::test]
async fn a_detached_process_survives_its_trees_end() {
    let service = SubprocessService::new();
    let marker = escape::marker();
    let script = format!(
        "DSH_DETACH=1 setsid bash -c 'exec -a {marker}-detached sleep 1000' >/dev/null 2>&1 & \
         until pgrep -f '^{marker}-' >/dev/null; do sleep 0.01; done; echo armed"
    );
    let handle = service.spawn(bash(&script)).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert!(handle.wait_for_exit(None).await);
    // Give the reaper every chance to (wrongly) kill it: two more trees end meanwhile.
    for _ in 0..2 {
        service.spawn(bash("true")).expect("spawn").wait().await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let alive = escape::survivors(&marker);
    assert_eq!(alive.len(), 1, "the opted-out process survived");
    escape::kill_all(&alive);
}
