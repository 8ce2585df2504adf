//! Output redaction through the service: what a redactor built from the ambient environment
//! does to a child's streams, its spill file and the latest-line peek.

use std::sync::Arc;

use dsh_subprocess::{Redactor, ServiceOptions, SubprocessService};

use crate::{ambient_with, bash, limits};

const SECRET: &str = "ghp_secretvalue123";

fn redacting_service(dir: &std::path::Path) -> Arc<SubprocessService> {
    let ambient = ambient_with(&[("GITHUB_TOKEN", SECRET)]);
    let redactor = Redactor::from_env(&ambient, true, &[]).expect("redactor");
    SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(dir.to_path_buf()),
        ambient_env: ambient,
        redactor: Some(Arc::new(redactor)),
        ..ServiceOptions::default()
    })
}

#[tokio::test]
async fn streams_spill_files_and_the_latest_line_are_redacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = redacting_service(dir.path());
    // The child cannot see the scrubbed variable; it prints the value from its argument.
    // Its stderr line comes well before its last stdout line: the peek looks at the stream
    // written last, and two pipes are read by two readers, in no order between them.
    let script = format!(
        "echo 'err {SECRET}' >&2; sleep 0.5; echo \"env: ${{GITHUB_TOKEN-unset}}\"; printf '%s' '{}'; \
         sleep 0.05; echo '{}'; seq 1 2000; echo 'last {SECRET}'; sleep 1.5",
        &SECRET[..5],
        &SECRET[5..]
    );
    let mut spec = bash(&script);
    spec.stdout = limits("stdout", 64, Some(1 << 20));
    let handle = service.spawn(spec).expect("spawn");
    // The peek is taken while the child still runs (it sleeps after its last line); however
    // slow the machine, the last line comes (and stays: a peek consumes nothing).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let seen = loop {
        if let Some(line) = handle.latest_output_line().filter(|l| l.starts_with("last")) {
            break Some(line);
        }
        if tokio::time::Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(seen.as_deref(), Some("last [redacted:GITHUB_TOKEN]"), "the peek");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    let stdout = handle.stdout().collected();
    assert!(stdout.text.ends_with("2000\nlast [redacted:GITHUB_TOKEN]\n"), "{:?}", stdout.text);
    assert_eq!(handle.stderr().collected().text, "err [redacted:GITHUB_TOKEN]\n");
    let spill = std::fs::read_to_string(stdout.spill_path.expect("spill")).expect("spill file");
    assert!(spill.starts_with("env: unset\n[redacted:GITHUB_TOKEN]\n1\n2\n"), "{:?}", &spill[..40]);
    assert!(!spill.contains(SECRET));
    assert_eq!(handle.stdout().total(), spill.len() as u64);
}

#[tokio::test]
async fn without_a_redactor_output_is_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(dir.path().to_path_buf()),
        ambient_env: ambient_with(&[("GITHUB_TOKEN", SECRET)]),
        ..ServiceOptions::default()
    });
    assert!(service.redactor().is_none());
    let handle = service.spawn(bash(&format!("echo '{SECRET}'"))).expect("spawn");
    handle.wait().await;
    assert_eq!(handle.stdout().collected().text, format!("{SECRET}\n"));
}
