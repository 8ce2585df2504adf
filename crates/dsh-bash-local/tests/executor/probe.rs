//! The output probe of a foreground run: the latest line while it runs, nothing after.

use std::time::Duration;

use dsh_core::tools::OutputProbeSlot;
use dsh_shell::{ShellExecRequest, ShellExecutor};

use crate::{executor_in, request};

/// Polls the slot until its latest line is `want` (generous bound; output arrives
/// asynchronously).
async fn until_line(slot: &OutputProbeSlot, want: &str) {
    let polled = tokio::time::timeout(Duration::from_secs(10), async {
        while slot.latest_line().as_deref() != Some(want) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "latest line {want:?} never seen (last: {:?})", slot.latest_line());
}

#[tokio::test]
async fn a_running_command_shows_its_latest_line_of_either_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let slot = OutputProbeSlot::new();
    let command = "echo 'step 1'; read -r _ < go1; printf 'half' >&2; read -r _ < go2; \
                   printf '10%%\\r50%%\\r'; read -r _ < go3";
    for fifo in ["go1", "go2", "go3"] {
        let path = dir.path().join(fifo);
        let made = std::process::Command::new("mkfifo").arg(&path).status().expect("mkfifo");
        assert!(made.success());
    }
    let spec = executor
        .resolve(ShellExecRequest {
            workdir: Some(dir.path().to_path_buf()),
            output_probe: Some(slot.clone()),
            ..request(command)
        })
        .expect("resolve");
    assert!(!slot.is_installed(), "nothing runs yet");
    let run = tokio::spawn(async move { executor.run(spec).await });
    until_line(&slot, "step 1").await;
    std::fs::write(dir.path().join("go1"), "\n").expect("go1");
    until_line(&slot, "half").await; // stderr, written last, a partial line
    std::fs::write(dir.path().join("go2"), "\n").expect("go2");
    until_line(&slot, "50%").await; // after the last carriage return
    std::fs::write(dir.path().join("go3"), "\n").expect("go3");
    let result = run.await.expect("join").expect("run");
    assert_eq!(result.stdout.text, "step 1\n10%\r50%\r", "peeking consumed nothing");
    assert_eq!(result.stderr.text, "half");
    assert!(!slot.is_installed(), "the probe is removed when the run ends");
    assert_eq!(slot.latest_line(), None);
}
