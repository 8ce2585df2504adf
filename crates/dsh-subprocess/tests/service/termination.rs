use std::time::{Duration, Instant};

use crate::{bash, group_has_live_member as group_exists};
use dsh_subprocess::{Containment, ServiceOptions, SpawnSpec, SubprocessService};
use tokio_util::sync::CancellationToken;

/// Waits until the process has printed at least one byte (e.g. its "armed" line).
async fn armed(handle: &dsh_subprocess::ProcessHandle) {
    handle.stdout().wait_for_total(1).await;
    assert_eq!(handle.stdout().read_from(0).text, "armed\n");
}

#[tokio::test]
async fn sp_08_abort_terminates_with_sigterm() {
    let service = SubprocessService::new();
    let signal = CancellationToken::new();
    let mut spec = SpawnSpec::new(vec!["sleep".into(), "60".into()]);
    spec.cancel = Some(signal.clone());
    let started = Instant::now();
    let handle = service.spawn(spec).expect("spawn");
    let aborter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        signal.cancel();
    });
    let outcome = handle.wait().await;
    aborter.await.expect("aborter");
    assert_eq!((outcome.exit_code, outcome.signal.as_deref()), (None, Some("SIGTERM")));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn sp_08_terminate_twice_is_one_escalation() {
    let service = SubprocessService::new();
    let handle = service.spawn(SpawnSpec::new(vec!["sleep".into(), "60".into()])).expect("spawn");
    handle.terminate();
    handle.terminate();
    let outcome = handle.wait().await;
    assert_eq!(outcome.signal.as_deref(), Some("SIGTERM"));
    assert!(handle.wait_for_exit(None).await);
    handle.terminate(); // a no-op once the tree is gone
    assert_eq!(service.live_count(), 0);
}

#[tokio::test]
async fn sp_08_a_term_trapping_loop_is_killed_after_grace() {
    let service = SubprocessService::new();
    let handle =
        service.spawn(bash("trap '' TERM; echo armed; while :; do sleep 0.05; done")).expect("spawn");
    armed(&handle).await;
    let started = Instant::now();
    handle.terminate();
    let outcome = handle.wait().await;
    let elapsed = started.elapsed();
    assert_eq!((outcome.exit_code, outcome.signal.as_deref()), (None, Some("SIGKILL")));
    assert!(elapsed >= Duration::from_millis(150), "SIGKILL came after the grace, not before: {elapsed:?}");
    assert!(handle.wait_for_exit(None).await);
    assert!(!group_exists(handle.pid()));
}

#[tokio::test]
async fn a_term_trapping_descendant_is_killed_after_the_leader_exits() {
    // Without containment (which would kill it as soon as the leader exits).
    let service = SubprocessService::with_options(ServiceOptions {
        containment: Containment::None,
        ..ServiceOptions::default()
    });
    // The leader dies on TERM; the descendant ignores it (armed once its trap is set) and
    // holds no pipe.
    let handle = service
        .spawn(bash("(trap '' TERM; echo armed; exec sleep 60 >/dev/null 2>&1) & wait"))
        .expect("spawn");
    armed(&handle).await;
    handle.terminate();
    let outcome = handle.wait().await;
    assert_eq!(outcome.signal.as_deref(), Some("SIGTERM"));
    assert!(group_exists(handle.pid()), "the trapping descendant survived SIGTERM");
    assert!(handle.wait_for_exit(None).await, "SIGKILL follows after grace");
    assert!(!group_exists(handle.pid()));
}

#[tokio::test]
async fn sp_08_wait_for_exit_returns_false_when_its_signal_fires_first() {
    let service = SubprocessService::new();
    let handle = service.spawn(SpawnSpec::new(vec!["sleep".into(), "60".into()])).expect("spawn");
    let signal = CancellationToken::new();
    let trigger = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    assert!(!handle.wait_for_exit(Some(&signal)).await);
    handle.terminate();
    assert!(handle.wait_for_exit(None).await);
}

#[tokio::test]
async fn bf_18_an_inherited_pipe_is_bounded_by_grace() {
    // The reference behaviour (B.6): settlement leaves the descendant to the service.
    let service = SubprocessService::with_options(ServiceOptions {
        containment: Containment::None,
        ..ServiceOptions::default()
    });
    let started = Instant::now();
    let handle = service.spawn(bash("sleep 100 & echo hi")).expect("spawn");
    let outcome = handle.wait().await;
    let elapsed = started.elapsed();
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "hi\n");
    assert!(elapsed < Duration::from_secs(5), "returned in about grace, took {elapsed:?}");
    assert!(group_exists(handle.pid()));
    assert_eq!(service.live_count(), 1);
    service.dispose().await;
    assert!(!group_exists(handle.pid()));
    assert_eq!(service.live_count(), 0);
}

#[tokio::test]
async fn bf_18_with_containment_the_leaders_exit_ends_its_group() {
    let service = SubprocessService::new();
    assert!(service.containment().is_active(), "{}", service.containment());
    let started = Instant::now();
    let handle = service.spawn(bash("sleep 100 & echo hi")).expect("spawn");
    let outcome = handle.wait().await;
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "hi\n");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(handle.wait_for_exit(None).await);
    assert!(!group_exists(handle.pid()));
    assert_eq!(service.live_count(), 0);
}

#[tokio::test]
async fn dispose_kills_live_trees_and_leaves_settled_ones_alone() {
    let service = SubprocessService::new();
    let finished = service.spawn(bash("echo done")).expect("spawn");
    assert_eq!(finished.wait().await.exit_code, Some(0));
    let trapping = service.spawn(bash("trap '' TERM; echo armed; sleep 60")).expect("spawn");
    armed(&trapping).await;
    service.dispose().await;
    assert_eq!(finished.outcome().and_then(|o| o.exit_code), Some(0));
    assert_eq!(trapping.outcome().and_then(|o| o.signal).as_deref(), Some("SIGKILL"));
    assert!(!group_exists(trapping.pid()));
}

#[test]
fn dropping_the_service_kills_live_groups() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let pid = runtime.block_on(async {
        let service = SubprocessService::new();
        let handle = service.spawn(bash("trap '' TERM; echo armed; sleep 60")).expect("spawn");
        armed(&handle).await;
        let pid = handle.pid();
        drop(service);
        handle.wait().await;
        assert!(handle.wait_for_exit(None).await);
        pid
    });
    assert!(!group_exists(pid));
}
