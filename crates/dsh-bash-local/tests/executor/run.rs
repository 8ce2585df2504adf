use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use dsh_core::{AbortReason, AbortSignal};
use dsh_shell::{CollectedOutput, ShellError, ShellExecRequest, ShellExecutor, ShellTimeout};

use crate::{HUNDRED_LINES, executor_in, hundred_lines, request, run, run_with_timeout};

#[tokio::test]
async fn bf_01_plain_stdout_value_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let result = run(&executor, "echo hello").await;
    assert_eq!(
        serde_json::to_string(&result).expect("json"),
        r#"{"exitCode":0,"signal":null,"timedOut":false,"aborted":false,"timeoutMs":10000,"stdout":{"text":"hello\n","truncated":false},"stderr":{"text":"","truncated":false}}"#
    );
}

#[tokio::test]
async fn bf_04_timeout_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let result = run_with_timeout(&executor, "sleep 60", 100.0).await;
    assert_eq!((result.timed_out, result.aborted), (true, false));
    assert_eq!((result.exit_code, result.signal.as_deref()), (None, Some("SIGTERM")));
    assert_eq!(result.timeout, ShellTimeout::from_millis(100.0));
    assert_eq!(result.stdout, CollectedOutput::default());
}

#[tokio::test]
async fn bf_06_escalation_to_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let started = Instant::now();
    let result = run_with_timeout(&executor, "trap '' TERM; echo armed; sleep 60", 500.0).await;
    let elapsed = started.elapsed();
    assert_eq!(result.stdout.text, "armed\n");
    assert_eq!((result.timed_out, result.aborted), (true, false));
    assert_eq!((result.exit_code, result.signal.as_deref()), (None, Some("SIGKILL")));
    assert!(elapsed >= Duration::from_millis(680), "SIGKILL only after timeout + grace: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}

#[tokio::test]
async fn bf_07_self_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    for (command, signal) in [("kill -TERM $$", "SIGTERM"), ("kill -KILL $$", "SIGKILL")] {
        let result = run(&executor, command).await;
        assert_eq!((result.exit_code, result.signal.as_deref()), (None, Some(signal)));
        assert_eq!((result.timed_out, result.aborted), (false, false));
        assert_eq!(result.stdout.text, "");
    }
}

#[tokio::test]
async fn bf_08_stdout_truncation_with_spill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.max_output_bytes = 100.0);
    let result = run(&executor, HUNDRED_LINES).await;
    let all = hundred_lines();
    assert_eq!(result.stdout.text, all[900..]);
    assert!(result.stdout.text.starts_with("line-0091\n"));
    assert!(result.stdout.truncated);
    let path = result.stdout.spill_path.expect("spill path");
    assert_eq!(path.parent(), Some(dir.path()));
    let name = path.file_name().and_then(|n| n.to_str()).expect("name").to_owned();
    let prefix = format!("dsh-subprocess-{}-", std::process::id());
    let middle = name.strip_prefix(&prefix).and_then(|n| n.strip_suffix("-stdout.log")).expect(&name);
    let (counter, hex) = middle.split_once('-').expect(&name);
    assert!(counter.parse::<u64>().is_ok() && hex.len() == 12, "{name}");
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{name}");
    assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(&path).expect("spill"), all);
    assert_eq!(result.exit_code, Some(0));
}

#[tokio::test]
async fn bf_09_spill_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| {
        c.max_output_bytes = 100.0;
        c.max_spill_bytes = 500.0;
    });
    let result = run(&executor, HUNDRED_LINES).await;
    assert_eq!(
        result.stdout,
        CollectedOutput {
            text: hundred_lines()[900..].to_owned(),
            truncated: true,
            spill_path: None,
            spill_error: None
        }
    );
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0, "no spill file left");
}

#[tokio::test]
async fn bf_10_stderr_truncation_keeps_sections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.max_output_bytes = 100.0);
    let result =
        run(&executor, r#"echo ok; for i in $(seq 1 100); do printf "line-%04d\n" $i >&2; done"#).await;
    assert_eq!(
        result.stdout,
        CollectedOutput { text: "ok\n".into(), truncated: false, spill_path: None, spill_error: None }
    );
    assert_eq!(result.stderr.text, hundred_lines()[900..]);
    assert!(result.stderr.truncated);
    let path = result.stderr.spill_path.expect("stderr spill");
    assert!(path.to_string_lossy().ends_with("-stderr.log"));
    assert_eq!(std::fs::read_to_string(path).expect("spill"), hundred_lines());
}

#[tokio::test]
async fn bf_18_inherited_pipe_bounded_by_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, service) = executor_in(dir.path(), |_| {});
    let started = Instant::now();
    let result = run(&executor, "sleep 30 & echo shell-done").await;
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(result.stdout.text, "shell-done\n");
    assert_eq!(result.exit_code, Some(0));
    service.dispose().await;
}

#[tokio::test]
async fn ex_03_stdout_max_bytes_raises_stdout_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.max_output_bytes = 100.0);
    let spec = executor
        .resolve(ShellExecRequest {
            stdout_max_bytes: Some(500.0),
            ..request(r#"printf "%.0sx" $(seq 1 500); printf "%.0se" $(seq 1 500) >&2"#)
        })
        .expect("resolve");
    let result = executor.run(spec).await.expect("run");
    assert_eq!(
        result.stdout,
        CollectedOutput { text: "x".repeat(500), truncated: false, spill_path: None, spill_error: None }
    );
    assert!(result.stderr.truncated);
    assert_eq!(result.stderr.text, "e".repeat(100));
}

#[tokio::test]
async fn ex_05_first_cause_classification() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let result = run_with_timeout(&executor, "sleep 60", 100.0).await;
    assert_eq!((result.timed_out, result.aborted, result.timeout.millis()), (true, false, 100.0));

    let caller = AbortSignal::new();
    let spec = executor
        .resolve(ShellExecRequest { signal: Some(caller.clone()), ..request("sleep 60") })
        .expect("resolve");
    let aborter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        caller.abort(AbortReason::new("user cancelled"));
    });
    let result = executor.run(spec).await.expect("an aborted run still resolves");
    aborter.await.expect("aborter");
    assert_eq!((result.timed_out, result.aborted), (false, true));
    assert_eq!(result.signal.as_deref(), Some("SIGTERM"));

    let result = run(&executor, "kill -TERM $$").await;
    assert_eq!((result.signal.as_deref(), result.timed_out, result.aborted), (Some("SIGTERM"), false, false));

    // A command that traps TERM and exits 0 still timed out.
    let result = run_with_timeout(&executor, "trap 'exit 0' TERM; sleep 60 & wait", 100.0).await;
    assert_eq!((result.exit_code, result.timed_out, result.aborted), (Some(0), true, false));
}

#[tokio::test]
async fn ex_06_spawn_failure_rejects_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let spec = executor
        .resolve(ShellExecRequest { workdir: Some("/nonexistent-dsh".into()), ..request("true") })
        .expect("resolve");
    let err = executor.run(spec).await.expect_err("rejects");
    assert_eq!(
        err,
        ShellError::Spawn {
            message: "spawn bash ENOENT: working directory /nonexistent-dsh does not exist".into(),
            code: Some("ENOENT".into()),
            program: "bash".into()
        }
    );
}

#[tokio::test]
async fn a_pre_aborted_caller_signal_rejects_before_spawn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let caller = AbortSignal::new();
    caller.abort(AbortReason::new("too late"));
    let spec = executor
        .resolve(ShellExecRequest { signal: Some(caller), ..request("echo never") })
        .expect("resolve");
    let err = executor.run(spec).await.expect_err("rejects");
    assert_eq!(err.to_string(), "aborted before spawn: too late");
}

#[tokio::test]
async fn stdin_reaches_the_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let spec = executor
        .resolve(ShellExecRequest { stdin: Some(b"payload".to_vec()), ..request("cat; echo") })
        .expect("resolve");
    assert_eq!(executor.run(spec).await.expect("run").stdout.text, "payload\n");
    assert_eq!(run(&executor, "cat; echo end").await.stdout.text, "end\n", "no stdin is /dev/null");
}

#[tokio::test]
async fn utf8_is_never_split_at_the_tail_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.max_output_bytes = 100.0);
    // 40 × "€" = 120 bytes; the last 100 bytes start one byte into a character.
    let result = run(&executor, r#"for i in $(seq 1 40); do printf '€'; done"#).await;
    assert_eq!(result.stdout.text, "€".repeat(33));
    assert!(result.stdout.truncated);
}

#[tokio::test]
async fn a_dropped_run_terminates_its_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |_| {});
    let pid_file = dir.path().join("pid");
    let command = format!("echo $$ > '{}'; exec sleep 60", pid_file.display());
    let spec = executor.resolve(request(&command)).expect("resolve");
    let mut run = Box::pin(executor.run(spec));
    let pid = loop {
        tokio::select! {
            _ = &mut run => panic!("sleep 60 finished early"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<u32>().ok())
        {
            break pid;
        }
    };
    drop(run);
    let gone = tokio::time::timeout(Duration::from_secs(10), async {
        while crate::group_has_live_member(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the command outlived its dropped run");
}
