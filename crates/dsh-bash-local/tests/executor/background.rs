use std::time::{Duration, Instant};

use dsh_core::AbortSignal;
use dsh_shell::{ProcessStatus, ShellExecRequest, ShellExecutor, ShellProcess, ShellProcessRead};

use crate::{
    HUNDRED_LINES, executor_in, group_has_live_member, hundred_lines, read_until, request, resolved,
};

#[tokio::test]
async fn ex_07_start_returns_immediately() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let started = Instant::now();
    let process = executor.start(resolved(&executor, "sleep 0.2; echo done")).expect("start");
    assert!(started.elapsed() < Duration::from_millis(150), "{:?}", started.elapsed());
    assert_eq!(process.status(), ProcessStatus::Running);
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Completed);
    assert_eq!((process.exit_code(), process.signal()), (Some(0), None));
    assert_eq!(process.read_output().delta, "done\n");
}

#[tokio::test]
async fn ex_08_consuming_reads_and_stderr_merge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let process = executor.start(resolved(&executor, "echo first; sleep 1; echo second")).expect("start");
    assert_eq!(read_until(process.as_ref(), "first\n").await, "first\n");
    process.done().await;
    let read = process.read_output();
    assert_eq!((read.delta.as_str(), read.lossy), ("second\n", false));
    assert_eq!(process.read_output(), ShellProcessRead::default());

    for (command, delta) in [
        ("echo out; echo err >&2", "out\n[stderr]\nerr\n"),
        ("echo err >&2", "[stderr]\nerr\n"),
        ("printf out; echo err >&2", "out\n[stderr]\nerr\n"),
    ] {
        let process = executor.start(resolved(&executor, command)).expect("start");
        process.done().await;
        assert_eq!(process.read_output().delta, delta, "{command}");
    }
}

#[tokio::test]
async fn ex_09_lossy_background_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.max_output_bytes = 100.0);
    let process = executor.start(resolved(&executor, HUNDRED_LINES)).expect("start");
    process.done().await;
    let read = process.read_output();
    assert!(read.lossy);
    assert_eq!(read.delta, hundred_lines()[900..]);
    let path = read.stdout_spill_path.expect("stdout spill");
    assert_eq!(std::fs::read_to_string(path).expect("spill"), hundred_lines());
    assert_eq!(read.stderr_spill_path, None);

    let command = format!("{{ {HUNDRED_LINES}; }} >&2");
    let process = executor.start(resolved(&executor, &command)).expect("start");
    process.done().await;
    let read = process.read_output();
    assert!(read.lossy);
    assert_eq!(read.delta, format!("[stderr]\n{}", &hundred_lines()[900..]));
    let path = read.stderr_spill_path.expect("stderr spill");
    assert_eq!(std::fs::read_to_string(path).expect("spill"), hundred_lines());
}

#[tokio::test]
async fn ex_11_self_signal_and_spec_abort() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let process = executor.start(resolved(&executor, "kill -TERM $$")).expect("start");
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert_eq!((process.exit_code(), process.signal().as_deref()), (None, Some("SIGTERM")));

    let signal = AbortSignal::new();
    let spec = executor
        .resolve(ShellExecRequest { signal: Some(signal.clone()), ..request("sleep 60") })
        .expect("resolve");
    let process = executor.start(spec).expect("start");
    signal.abort_default();
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert_eq!(process.signal().as_deref(), Some("SIGTERM"));

    let process = executor.start(resolved(&executor, "exit 143")).expect("start");
    process.done().await;
    assert_eq!((process.status(), process.exit_code()), (ProcessStatus::Completed, Some(143)));
}

#[tokio::test]
async fn ex_12_background_spawn_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let spec = executor
        .resolve(ShellExecRequest { workdir: Some("/nonexistent-dsh".into()), ..request("true") })
        .expect("resolve");
    let process = executor.start(spec).expect("start never fails for an OS spawn error");
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert_eq!((process.exit_code(), process.signal()), (None, None));
    assert_eq!(
        process.read_output().delta,
        "[stderr]\nspawn failed: Error: spawn bash ENOENT: working directory /nonexistent-dsh does not exist"
    );
    assert_eq!(process.read_output().delta, "");
    assert!(!process.kill());
}

#[tokio::test]
async fn kill_is_true_once_then_false() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let process = executor.start(resolved(&executor, "sleep 60")).expect("start");
    assert!(process.kill());
    assert_eq!(process.status(), ProcessStatus::Killed, "killed immediately");
    assert!(!process.kill());
    process.done().await;
    assert_eq!((process.status(), process.signal().as_deref()), (ProcessStatus::Killed, Some("SIGTERM")));
}

#[tokio::test]
async fn ex_13_ownership_across_reloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, service) = executor_in(dir.path(), |_| {});
    let process = executor.start(resolved(&executor, "echo $$; sleep 60")).expect("start");
    let pid: u32 = read_until(process.as_ref(), "\n").await.trim().parse().expect("pid");
    drop(executor);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(group_has_live_member(pid), "disposing the executor alone leaves it running");
    assert_eq!(process.status(), ProcessStatus::Running);
    service.dispose().await;
    assert!(!group_has_live_member(pid));
    assert_eq!(process.status(), ProcessStatus::Killed);
}

#[tokio::test]
async fn ex_14_service_disposal_escalation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, service) = executor_in(dir.path(), |_| {});
    let finished = executor.start(resolved(&executor, "echo done")).expect("start");
    finished.done().await;
    let trapping = executor.start(resolved(&executor, "trap '' TERM; echo armed; sleep 60")).expect("start");
    read_until(trapping.as_ref(), "armed\n").await;
    service.dispose().await;
    trapping.done().await;
    assert_eq!(finished.status(), ProcessStatus::Completed);
    assert_eq!((trapping.status(), trapping.signal().as_deref()), (ProcessStatus::Killed, Some("SIGKILL")));
}

#[tokio::test]
async fn utf8_is_never_split_between_background_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let process = executor
        .start(resolved(&executor, r"printf 'a\xe2\x82'; sleep 0.5; printf '\xac\n'"))
        .expect("start");
    assert_eq!(read_until(process.as_ref(), "a").await, "a", "the partial character is held back");
    process.done().await;
    assert_eq!(process.read_output().delta, "€\n");
}

/// A background process read to the end of its settled output lets its buffers go (a
/// finished job keeps no output in memory once everything was read); its spill file stays
/// reported on later reads, and a process with output left unread keeps it.
#[tokio::test]
async fn a_process_read_to_the_end_releases_its_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.max_output_bytes = 100.0);
    let start = |command: &str| {
        let spec = resolved(&executor, command);
        executor.start_argv(&spec, dsh_bash_local::bash_argv(&spec.command), None, None).expect("start")
    };
    let process = start(&format!("{HUNDRED_LINES}; echo err >&2"));
    let unread = start("echo kept");
    process.done().await;
    unread.done().await;
    assert!(process.retains_output() && unread.retains_output(), "settled, not read yet");
    let read = process.read_output();
    assert!(read.delta.ends_with("[stderr]\nerr\n") && read.lossy, "{read:?}");
    let path = read.stdout_spill_path.clone().expect("stdout spill");
    assert!(!process.retains_output(), "read to the end: released");
    let again = process.read_output();
    assert_eq!(
        again,
        ShellProcessRead { stdout_spill_path: Some(path.clone()), ..ShellProcessRead::default() },
        "later reads still name the spill file"
    );
    assert_eq!(std::fs::read_to_string(path).expect("spill"), hundred_lines());
    assert_eq!(process.exit_code(), Some(0));
    assert!(unread.retains_output());
    assert_eq!(unread.read_output().delta, "kept\n");
    assert!(!unread.retains_output());
}
