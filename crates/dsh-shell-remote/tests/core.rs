//! The remote executor over a transport that runs programs on this host (`bash` and `/proc`
//! are all the far side needs), so the core's semantics are checked without an engine.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_bash_local::LocalBashConfig;
use dsh_core::{AbortReason, AbortSignal};
use dsh_shell::{ProcessStatus, ShellError, ShellExecRequest, ShellExecutor, ShellRunResult};
use dsh_shell_remote::{
    RemoteChild, RemoteError, RemoteExecSpec, RemoteExecutor, RemoteExit, RemoteTransport,
};
use dsh_subprocess::{ServiceOptions, SubprocessService};

/// Runs each program as a child of the test, with nothing of the test's environment but
/// `PATH`.
struct HostTransport;

#[async_trait::async_trait]
impl RemoteTransport for HostTransport {
    fn kind(&self) -> &'static str {
        "test"
    }

    fn describe(&self) -> String {
        "this host".to_owned()
    }

    async fn exec(&self, spec: RemoteExecSpec) -> Result<RemoteChild, RemoteError> {
        let mut command = tokio::process::Command::new(&spec.argv[0]);
        command.args(&spec.argv[1..]).env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin").envs(&spec.env);
        command.stdin(if spec.stdin { Stdio::piped() } else { Stdio::null() });
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| RemoteError::Failed(e.to_string()))?;
        let stdin = child.stdin.take().map(|s| Box::new(s) as _);
        let stdout = Box::new(child.stdout.take().expect("piped"));
        let stderr = Box::new(child.stderr.take().expect("piped"));
        let exit = Box::pin(async move {
            let status = child.wait().await.map_err(|e| RemoteError::Failed(e.to_string()))?;
            Ok(RemoteExit { code: status.code(), out_of_memory: false })
        });
        Ok(RemoteChild { stdin, stdout, stderr, exit })
    }

    async fn probe(&self) -> Result<String, RemoteError> {
        Ok("ready".to_owned())
    }

    async fn shutdown(&self) -> Result<(), RemoteError> {
        Ok(())
    }
}

fn executor_with(config: LocalBashConfig, spill_dir: &Path) -> RemoteExecutor {
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(spill_dir.to_path_buf()),
        ..ServiceOptions::default()
    });
    RemoteExecutor::new(Arc::new(HostTransport), config, service).expect("valid config")
}

fn executor(spill_dir: &Path) -> RemoteExecutor {
    executor_with(LocalBashConfig { grace_ms: 200.0, ..LocalBashConfig::default() }, spill_dir)
}

fn request(command: &str) -> ShellExecRequest {
    ShellExecRequest { command: command.to_owned(), ..ShellExecRequest::default() }
}

async fn run(executor: &RemoteExecutor, request: ShellExecRequest) -> ShellRunResult {
    let spec = executor.resolve(request).expect("resolves");
    executor.run(spec).await.expect("runs")
}

fn facts(result: &ShellRunResult) -> (&str, &str, Option<i32>, Option<&str>, bool, bool) {
    (
        &result.stdout.text,
        &result.stderr.text,
        result.exit_code,
        result.signal.as_deref(),
        result.timed_out,
        result.aborted,
    )
}

fn alive(pattern: &str) -> bool {
    std::process::Command::new("pgrep").args(["-f", pattern]).output().is_ok_and(|o| o.status.success())
}

#[tokio::test]
async fn bf_output_sections_and_exit_facts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let result = run(&executor, request("echo out; echo err >&2")).await;
    assert_eq!(facts(&result), ("out\n", "err\n", Some(0), None, false, false));
    let result = run(&executor, request("printf x; exit 7")).await;
    assert_eq!(facts(&result), ("x", "", Some(7), None, false, false));
    assert!(!result.out_of_memory);
}

#[tokio::test]
async fn bf_07_a_self_signal_is_a_signal_not_an_exit_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let result = run(&executor, request("kill -TERM $$")).await;
    assert_eq!(facts(&result), ("", "", None, Some("SIGTERM"), false, false));
    let result = run(&executor, request("kill -KILL $$")).await;
    assert_eq!(facts(&result), ("", "", None, Some("SIGKILL"), false, false));
    // An exit status that looks like a signal stays an exit status.
    let result = run(&executor, request("exit 143")).await;
    assert_eq!(facts(&result), ("", "", Some(143), None, false, false));
}

#[tokio::test]
async fn bf_04_and_bf_06_timeouts_end_with_term_then_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let result = run(&executor, ShellExecRequest { timeout_ms: Some(100.0), ..request("sleep 60") }).await;
    assert_eq!(facts(&result), ("", "", None, Some("SIGTERM"), true, false));
    assert_eq!(result.timeout.millis(), 100.0);
    let started = Instant::now();
    let result = run(
        &executor,
        ShellExecRequest { timeout_ms: Some(500.0), ..request("trap '' TERM; echo armed; sleep 60") },
    )
    .await;
    assert_eq!(facts(&result), ("armed\n", "", None, Some("SIGKILL"), true, false));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn ex_05_a_caller_abort_is_the_first_cause() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let signal = AbortSignal::new();
    let aborting = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        aborting.abort(AbortReason::new("stop"));
    });
    let result = run(&executor, ShellExecRequest { signal: Some(signal), ..request("sleep 60") }).await;
    assert_eq!(facts(&result), ("", "", None, Some("SIGTERM"), false, true));
}

#[tokio::test]
async fn bf_18_a_background_child_holding_the_pipe_does_not_hold_the_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let started = Instant::now();
    let result = run(&executor, request("sleep 31 & echo shell-done")).await;
    assert_eq!(facts(&result), ("shell-done\n", "", Some(0), None, false, false));
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(!alive("^sleep 31$"));
}

#[tokio::test]
async fn a_setsid_or_double_fork_escape_dies_with_the_call_unless_detached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let started = Instant::now();
    let result = run(
        &executor,
        request("setsid sleep 32 & (sleep 33 &); DSH_DETACH=1 setsid sleep 34 & sleep 0.2; echo done"),
    )
    .await;
    assert_eq!(facts(&result), ("done\n", "", Some(0), None, false, false));
    // The detached process holds the call's streams: the call waits for it only the grace.
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(!alive("^sleep 32$"), "setsid escape survived");
    assert!(!alive("^sleep 33$"), "double fork survived");
    assert!(alive("^sleep 34$"), "a detached process was killed");
    let _ = std::process::Command::new("pkill").args(["-f", "^sleep 34$"]).status();
}

#[tokio::test]
async fn a_timeout_reaches_an_escape_that_left_the_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let result =
        run(&executor, ShellExecRequest { timeout_ms: Some(300.0), ..request("setsid sleep 35 & sleep 60") })
            .await;
    assert!(result.timed_out);
    assert!(!alive("^sleep 35$"), "the escape survived the timeout");
}

#[tokio::test]
async fn stdin_env_and_workdir_reach_the_command_and_the_harness_environment_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let result = run(
        &executor,
        ShellExecRequest {
            stdin: Some(b"payload".to_vec()),
            workdir: Some(dir.path().to_path_buf()),
            env: Some([("A".to_owned(), "env".to_owned())].into()),
            dsh_env: Some([("A".to_owned(), "dsh".to_owned()), ("DSH_X".to_owned(), "1".to_owned())].into()),
            ..request("cat; echo; echo \"$A $DSH_X $TERM $PAGER ${HOME-unset}\"; pwd")
        },
    )
    .await;
    let expected = format!("payload\ndsh 1 dumb cat unset\n{}\n", dir.path().display());
    assert_eq!(facts(&result), (expected.as_str(), "", Some(0), None, false, false));
}

#[tokio::test]
async fn ex_06_a_missing_workdir_is_a_spawn_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let spec = executor
        .resolve(ShellExecRequest { workdir: Some("/nonexistent-dsh".into()), ..request("true") })
        .expect("resolves");
    let error = executor.run(spec).await.expect_err("refused");
    assert_eq!(error.to_string(), "spawn bash ENOENT: working directory /nonexistent-dsh does not exist");
    assert!(matches!(error, ShellError::Spawn { code: Some(ref c), .. } if c == "ENOENT"));
}

#[tokio::test]
async fn bf_08_output_beyond_the_tail_spills_where_the_command_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LocalBashConfig { max_output_bytes: 100.0, ..LocalBashConfig::default() };
    let executor = executor_with(config, dir.path());
    let result = run(&executor, request(r#"for i in $(seq 1 100); do printf "line-%04d\n" $i; done"#)).await;
    let all: String = (1..=100).map(|i| format!("line-{i:04}\n")).collect();
    assert_eq!(result.stdout.text, all[900..]);
    assert!(result.stdout.truncated);
    // The result names the far side's copy, in a directory of the session's own there.
    let spill = result.stdout.spill_path.expect("spilled");
    assert!(!spill.starts_with(dir.path()), "{}", spill.display());
    let far_dir = spill.parent().expect("a directory").to_path_buf();
    assert!(
        far_dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("dsh-spill-")),
        "{}",
        spill.display()
    );
    assert_eq!(std::fs::read_to_string(&spill).expect("spill file"), all);
    executor.release().await;
    assert!(!far_dir.exists(), "the far side's spill directory outlived the harness");
}

#[tokio::test]
async fn ex_07_ex_08_background_reads_consume_and_settle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let started = Instant::now();
    let spec = executor.resolve(request("echo first; sleep 1; echo second; echo err >&2")).expect("resolves");
    let process = executor.start(spec).expect("starts");
    assert!(started.elapsed() < Duration::from_millis(150));
    assert_eq!(process.status(), ProcessStatus::Running);
    let mut seen = String::new();
    while !seen.contains("first") {
        seen.push_str(&process.read_output().delta);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, "first\n");
    process.done().await;
    assert_eq!((process.status(), process.exit_code()), (ProcessStatus::Completed, Some(0)));
    assert_eq!(process.read_output().delta, "second\n[stderr]\nerr\n");
    assert_eq!(process.read_output().delta, "");
}

#[tokio::test]
async fn ex_11_background_kill_and_self_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let process =
        executor.start(executor.resolve(request("kill -TERM $$")).expect("resolves")).expect("starts");
    process.done().await;
    assert_eq!(
        (process.status(), process.exit_code(), process.signal()),
        (ProcessStatus::Killed, None, Some("SIGTERM".to_owned()))
    );
    let process = executor.start(executor.resolve(request("sleep 36")).expect("resolves")).expect("starts");
    assert!(process.kill());
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert!(!alive("^sleep 36$"));
    assert!(!process.kill());
}

#[tokio::test]
async fn ex_12_background_spawn_failure_reads_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let spec = executor
        .resolve(ShellExecRequest { workdir: Some("/nonexistent-dsh".into()), ..request("true") })
        .expect("resolves");
    let process = executor.start(spec).expect("starts");
    process.done().await;
    assert_eq!(process.status(), ProcessStatus::Killed);
    assert_eq!(
        process.read_output().delta,
        "[stderr]\nspawn failed: Error: spawn bash ENOENT: working directory /nonexistent-dsh does not exist"
    );
    assert_eq!(process.read_output().delta, "");
}

#[tokio::test]
async fn background_input_reaches_the_command_until_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let spec = executor
        .resolve(ShellExecRequest {
            keep_stdin: true,
            ..request("while read -r line; do echo \"got $line\"; done; echo eof")
        })
        .expect("resolves");
    let process = executor.start(spec).expect("starts");
    process.write_input(b"one\n").expect("written");
    process.write_input(b"two\n").expect("written");
    assert!(process.close_input());
    process.done().await;
    assert_eq!(process.read_output().delta, "got one\ngot two\neof\n");
    assert_eq!(process.write_input(b"x"), Err("it has ended".to_owned()));
}

#[tokio::test]
async fn a_command_that_ends_at_once_still_reports_its_own_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    // A parent that reaps it before the wait status is read would leave no status at all
    // (the call script's race to lose): many calls, each over before the script looks.
    for i in 0..100 {
        let command = if i % 2 == 0 { "true" } else { "exit 3" };
        let result = run(&executor, request(command)).await;
        assert_eq!(result.exit_code, Some(if i % 2 == 0 { 0 } else { 3 }), "{i}: {result:?}");
    }
}

#[tokio::test]
async fn a_kill_that_comes_before_the_command_started_still_ends_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    for _ in 0..5 {
        let process =
            executor.start(executor.resolve(request("sleep 37")).expect("resolves")).expect("starts");
        assert!(process.kill());
        tokio::time::timeout(Duration::from_secs(10), process.done()).await.expect("ended in time");
        assert_eq!(process.status(), ProcessStatus::Killed);
        let timed = run(&executor, ShellExecRequest { timeout_ms: Some(1.0), ..request("sleep 38") });
        let result = tokio::time::timeout(Duration::from_secs(10), timed).await.expect("ended in time");
        assert!(result.timed_out);
    }
    assert!(!alive("^sleep 3[78]$"));
}

#[tokio::test]
async fn a_terminal_is_refused_rather_than_faked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let executor = executor(dir.path());
    let spec = executor.resolve(ShellExecRequest { tty: true, ..request("tty") }).expect("resolves");
    let message = "the test executor runs commands on pipes, not on a terminal (tty)";
    assert_eq!(executor.start(spec.clone()).err().map(|e| e.to_string()).as_deref(), Some(message));
    assert_eq!(executor.run(spec).await.expect_err("refused").to_string(), message);
}

/// Runs everything on this host like [`HostTransport`], except the copy of a spill file to the
/// far side, which goes to a program that never reads it (a far side that stalls).
struct StallingCopies;

#[async_trait::async_trait]
impl RemoteTransport for StallingCopies {
    fn kind(&self) -> &'static str {
        "test"
    }

    fn describe(&self) -> String {
        "this host, stalling spill copies".to_owned()
    }

    async fn exec(&self, mut spec: RemoteExecSpec) -> Result<RemoteChild, RemoteError> {
        // The copy's script (see `COPY_SCRIPT` in spill.rs), and nothing else.
        if spec.argv.get(2).is_some_and(|script| script == r#"umask 077; set -C; exec cat > "$1""#) {
            spec.argv = vec!["sleep".to_owned(), "40".to_owned()];
        }
        HostTransport.exec(spec).await
    }

    async fn probe(&self) -> Result<String, RemoteError> {
        Ok("ready".to_owned())
    }

    async fn shutdown(&self) -> Result<(), RemoteError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_far_side_that_stalls_a_spill_copy_does_not_hold_the_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(dir.path().to_path_buf()),
        ..ServiceOptions::default()
    });
    let config = LocalBashConfig { max_output_bytes: 100.0, ..LocalBashConfig::default() };
    let executor = RemoteExecutor::new(Arc::new(StallingCopies), config, service).expect("valid config");
    // Far more than a pipe holds, so the copy's writes block on the stalled reader.
    let started = Instant::now();
    let result = run(&executor, request("head -c 4000000 /dev/zero | tr '\\0' x; echo")).await;
    assert!(result.stdout.truncated);
    assert_eq!(result.stdout.spill_path, None, "a copy the far side never took is named");
    assert!(started.elapsed() < Duration::from_secs(39), "the result waited for the stalled copy to end");
}
