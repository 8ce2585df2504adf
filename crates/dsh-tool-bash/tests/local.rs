//! The tool over the real local executor (process-facing BF, TF, WE and JB cases).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Harness, text};
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::{AbortSignal, ErrorInfo, ToolExec};
use dsh_jobs::{JOBS, JobRegistry, JobStatus, JobsPlugin};
use dsh_shell::{ShellExecRequest, ShellExecutor};
use dsh_subprocess::{AmbientEnv, ServiceOptions, SubprocessService};
use dsh_tool_bash::Config;
use serde_json::{Value, json};

/// S-LOCAL's executor config: grace 200, timeout 10000, other keys default.
fn s_local() -> LocalBashConfig {
    LocalBashConfig { grace_ms: 200.0, timeout_ms: 10_000.0, ..LocalBashConfig::default() }
}

struct Local {
    h: Harness,
    executor: Arc<LocalBashExecutor>,
    _controller: Option<dsh_core::Disposer>,
}

impl Local {
    fn new(config: LocalBashConfig, options: ServiceOptions) -> Self {
        let executor = Arc::new(
            LocalBashExecutor::new(config, SubprocessService::with_options(options)).expect("config"),
        );
        let h = Harness::new(executor.clone(), Config::default());
        Self { h, executor, _controller: None }
    }

    fn default() -> Self {
        Self::new(s_local(), ServiceOptions::default())
    }

    /// With the jobs runtime and an attached controller.
    fn with_jobs(mut self) -> Self {
        self.h.ctx.load_default::<JobsPlugin>().expect("jobs");
        self._controller = Some(self.jobs().attach_controller());
        self
    }

    fn jobs(&self) -> Arc<dyn JobRegistry> {
        self.h.ctx.get(JOBS).expect("jobs")
    }

    async fn run(&self, command: &str) -> String {
        let r = self.h.call(json!({"command": command, "description": "d"})).await;
        assert!(!r.is_error, "{command}: {}", text(&r));
        text(&r)
    }

    async fn call(&self, args: Value) -> dsh_core::ToolResult {
        self.h.call(args).await
    }

    /// Starts `command` in the background, waits for settlement, and reads everything.
    async fn background(&self, args: Value) -> (String, dsh_jobs::JobSnapshot) {
        let r = self.h.call(args).await;
        assert!(!r.is_error, "{}", text(&r));
        let id = r.value.expect("value")["jobId"].as_str().expect("id").to_owned();
        let jobs = self.jobs();
        let snapshot = tokio::time::timeout(Duration::from_secs(20), jobs.wait(&id, 15_000.0, None, None))
            .await
            .expect("settles")
            .expect("wait");
        let (output, _) = jobs.read(&id, None).expect("read");
        (output, snapshot)
    }

    async fn dispose(&self) {
        self.executor.service().dispose().await;
    }
}

fn bg(command: &str) -> Value {
    json!({"command": command, "description": "d", "run_in_background": true})
}

#[tokio::test]
async fn bf_01_plain_stdout_and_value_shape() {
    let l = Local::default();
    let r = l.call(json!({"command": "echo hello", "description": "test command"})).await;
    assert!(!r.is_error);
    assert_eq!(text(&r), "hello\n");
    assert_eq!(
        r.value.expect("value").to_string(),
        r#"{"kind":"foreground","exitCode":0,"signal":null,"timedOut":false,"aborted":false,"timeoutMs":10000,"stdout":{"text":"hello\n","truncated":false},"stderr":{"text":"","truncated":false}}"#
    );
}

#[tokio::test]
async fn bf_02_section_joining() {
    let l = Local::default();
    assert_eq!(l.run("true").await, "(no output)");
    assert_eq!(l.run("echo out; echo err >&2").await, "out\n[stderr]\nerr\n");
    assert_eq!(l.run("printf out; printf err >&2").await, "out\n[stderr]\nerr");
    assert_eq!(l.run("echo err >&2").await, "[stderr]\nerr\n");
}

#[tokio::test]
async fn bf_03_exit_markers() {
    let l = Local::default();
    let r = l.call(json!({"command": "printf x; exit 7", "description": "d"})).await;
    assert!(!r.is_error);
    assert_eq!((text(&r), r.value.expect("v")["exitCode"].clone()), ("x\n[exit code: 7]".into(), json!(7)));
    let r = l.call(json!({"command": "echo failing; exit 3", "description": "d"})).await;
    assert!(!r.is_error);
    assert_eq!(
        (text(&r), r.value.expect("v")["exitCode"].clone()),
        ("failing\n[exit code: 3]".into(), json!(3))
    );
}

#[tokio::test]
async fn bf_04_timeout_kill() {
    let l = Local::default();
    let r = l.call(json!({"command": "sleep 60", "description": "d", "timeoutMs": 100})).await;
    assert!(!r.is_error);
    assert_eq!(text(&r), "(no output)\n[timed out after 100ms]\n[killed by signal: SIGTERM]");
    let v = r.value.expect("value");
    assert_eq!(
        (&v["timedOut"], &v["aborted"], &v["signal"], &v["exitCode"], &v["timeoutMs"]),
        (&json!(true), &json!(false), &json!("SIGTERM"), &json!(null), &json!(100))
    );
}

#[tokio::test]
async fn bf_06_escalation_to_sigkill() {
    let l = Local::default();
    let started = Instant::now();
    let r = l
        .call(json!({"command": "trap '' TERM; echo armed; sleep 60", "description": "d", "timeoutMs": 500}))
        .await;
    let elapsed = started.elapsed();
    assert_eq!(text(&r), "armed\n[timed out after 500ms]\n[killed by signal: SIGKILL]");
    assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
}

#[tokio::test]
async fn bf_07_self_signal() {
    let l = Local::default();
    let r = l.call(json!({"command": "kill -TERM $$", "description": "d"})).await;
    assert_eq!(text(&r), "(no output)\n[killed by signal: SIGTERM]");
    let v = r.value.expect("value");
    assert_eq!((&v["timedOut"], &v["aborted"]), (&json!(false), &json!(false)));
    assert_eq!(l.run("kill -KILL $$").await, "(no output)\n[killed by signal: SIGKILL]");
}

const LOOP: &str = r#"for i in $(seq 1 100); do printf "line-%04d\n" $i; done"#;

fn last_lines() -> String {
    (91..=100).map(|i| format!("line-{i:04}\n")).collect()
}

fn all_lines() -> String {
    (1..=100).map(|i| format!("line-{i:04}\n")).collect()
}

fn spill_options(dir: &Path) -> ServiceOptions {
    ServiceOptions { spill_dir: Some(dir.to_path_buf()), ..ServiceOptions::default() }
}

#[tokio::test]
async fn bf_08_stdout_truncation_with_spill() {
    let dir = tempfile::tempdir().expect("tmp");
    let l = Local::new(LocalBashConfig { max_output_bytes: 100.0, ..s_local() }, spill_options(dir.path()));
    let r = l.call(json!({"command": LOOP, "description": "d"})).await;
    let value = r.value.clone().expect("value");
    let path = PathBuf::from(value["stdout"]["spillPath"].as_str().expect("spill path"));
    assert_eq!(text(&r), format!("{}\n[output truncated; full output: {}]", last_lines(), path.display()));
    assert_eq!(
        value["stdout"],
        json!({"text": last_lines(), "truncated": true, "spillPath": path.to_string_lossy()})
    );
    assert_eq!(path.parent(), Some(dir.path()));
    let name = path.file_name().expect("name").to_string_lossy().into_owned();
    let middle =
        name.strip_prefix("dsh-subprocess-").and_then(|n| n.strip_suffix("-stdout.log")).expect(&name);
    let parts: Vec<&str> = middle.split('-').collect();
    assert_eq!(parts.len(), 3, "{name}");
    assert!(
        parts[0].bytes().all(|b| b.is_ascii_digit()) && parts[1].bytes().all(|b| b.is_ascii_digit()),
        "{name}"
    );
    assert!(
        parts[2].len() == 12 && parts[2].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_eq!(std::fs::metadata(&path).expect("file").permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(&path).expect("read"), all_lines());
}

#[tokio::test]
async fn bf_09_spill_unavailable() {
    let dir = tempfile::tempdir().expect("tmp");
    let l = Local::new(
        LocalBashConfig { max_output_bytes: 100.0, max_spill_bytes: 500.0, ..s_local() },
        spill_options(dir.path()),
    );
    let r = l.call(json!({"command": LOOP, "description": "d"})).await;
    assert!(
        text(&r).ends_with("line-0100\n\n[output truncated; full output: (unavailable)]"),
        "{}",
        text(&r)
    );
    assert_eq!(r.value.expect("value")["stdout"], json!({"text": last_lines(), "truncated": true}));
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0, "no spill file left");
}

#[tokio::test]
async fn bf_10_stderr_truncation_keeps_sections() {
    let dir = tempfile::tempdir().expect("tmp");
    let l = Local::new(LocalBashConfig { max_output_bytes: 100.0, ..s_local() }, spill_options(dir.path()));
    let command = r#"echo ok; for i in $(seq 1 100); do printf "line-%04d\n" $i >&2; done"#;
    let r = l.call(json!({"command": command, "description": "d"})).await;
    let path = r.value.clone().expect("value")["stderr"]["spillPath"].as_str().expect("path").to_owned();
    assert!(path.ends_with("-stderr.log"), "{path}");
    assert_eq!(text(&r), format!("ok\n[stderr]\n{}\n[output truncated; full output: {path}]", last_lines()));
}

#[tokio::test]
async fn bf_12_timeout_default_and_cap() {
    let l = Local::new(
        LocalBashConfig { timeout_ms: 1000.0, max_timeout_ms: 2000.0, ..s_local() },
        ServiceOptions::default(),
    );
    let r = l.call(json!({"command": "true", "description": "d"})).await;
    assert_eq!(r.value.expect("value")["timeoutMs"], json!(1000));
    let r = l.call(json!({"command": "true", "description": "d", "timeoutMs": 99999})).await;
    assert_eq!(r.value.expect("value")["timeoutMs"], json!(2000));
    let l = Local::new(LocalBashConfig::default(), ServiceOptions::default());
    let r = l.call(json!({"command": "true", "description": "d"})).await;
    assert_eq!(r.value.expect("value")["timeoutMs"], json!(120000));
}

const SNEAKY: &str = r#"echo "${SNEAKY_VAR-unset}"; cat; echo end"#;

#[tokio::test]
async fn bf_16_model_supplied_trusted_fields_ignored() {
    let l = Local::default().with_jobs();
    let extras = |mut v: Value| {
        v["env"] = json!({"SNEAKY_VAR": "leak"});
        v["stdin"] = json!("payload");
        v["stdoutMaxBytes"] = json!(5);
        v
    };
    let r = l.call(extras(json!({"command": SNEAKY, "description": "d"}))).await;
    assert_eq!(text(&r), "unset\nend\n");
    let (output, snapshot) = l.background(extras(bg(SNEAKY))).await;
    assert_eq!(output, "unset\nend\n");
    assert_eq!(snapshot.detail.as_deref(), Some("exit code: 0"));
}

#[tokio::test]
async fn bf_18_inherited_pipe_bounded_by_grace() {
    let l = Local::default();
    let started = Instant::now();
    let r = l.call(json!({"command": "sleep 30 & echo shell-done", "description": "d"})).await;
    assert_eq!(text(&r), "shell-done\n");
    assert_eq!(r.value.expect("value")["exitCode"], json!(0));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    l.dispose().await;
}

#[tokio::test]
async fn tf_06_command_failure_vs_infrastructure_failure() {
    let l = Local::default();
    let r = l.call(json!({"command": "exit 9", "description": "d"})).await;
    assert!(!r.is_error);
    assert_eq!(text(&r), "(no output)\n[exit code: 9]");
    let r = l.call(json!({"command": "true", "description": "d", "workdir": "/nonexistent-dsh"})).await;
    assert!(r.is_error);
    let t = text(&r);
    assert!(t.starts_with("Error: ") && t.contains("ENOENT"), "{t}");
    assert_eq!(r.error.and_then(|e| e.info), None);
}

fn group_alive(pgid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence; no signal is delivered.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

#[tokio::test]
async fn tf_07_foreground_abort_mid_run() {
    let dir = tempfile::tempdir().expect("tmp");
    let pid_file = dir.path().join("pid");
    let l = Local::default();
    let signal = AbortSignal::new();
    let command = format!("echo $$ > {}; sleep 60", pid_file.display());
    let call = l.h.call_exec(
        json!({"command": command, "description": "d"}),
        ToolExec::new(None, "c").with_signal(signal.clone()),
    );
    let watcher = async {
        while !pid_file.exists() || std::fs::read_to_string(&pid_file).unwrap_or_default().trim().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        signal.abort_default();
    };
    let started = Instant::now();
    let (r, ()) = tokio::join!(call, watcher);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(text(&r), "Error: tool call aborted");
    let error = r.error.expect("error");
    assert_eq!(
        (error.message.as_str(), error.info),
        ("tool call aborted", Some(ErrorInfo::new("AbortError", "ABORTED")))
    );
    let pgid: i32 = std::fs::read_to_string(&pid_file).expect("pid").trim().parse().expect("pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    while group_alive(pgid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!group_alive(pgid), "the process group no longer exists");
}

#[tokio::test]
async fn we_01_explicit_workdir() {
    let l = Local::default();
    let r = l.call(json!({"command": "pwd", "description": "d", "workdir": "/tmp"})).await;
    assert!(text(&r).ends_with("/tmp\n"), "{}", text(&r));
}

async fn pwd_as(l: &Local, id: &str, cwd: &str, workdir: Option<&str>) -> String {
    let agent = l.h.agent(id, Some(cwd));
    let mut args = json!({"command": "pwd", "description": "d"});
    if let Some(w) = workdir {
        args["workdir"] = json!(w);
    }
    text(&l.h.call_as(&agent, args).await)
}

#[tokio::test]
async fn we_02_session_cwd_routing() {
    let l = Local::default();
    let canon = |p: &str| format!("{}\n", std::fs::canonicalize(p).expect("canon").display());
    assert_eq!(pwd_as(&l, "c-tmp", "/tmp", None).await, canon("/tmp"));
    assert_eq!(pwd_as(&l, "c-root", "/", Some("/tmp")).await, "/tmp\n");
    assert_eq!(pwd_as(&l, "c-usr", "/usr", Some("bin")).await, canon("/usr/bin"));
    let (a, b) = tokio::join!(pwd_as(&l, "two-usr", "/usr", None), pwd_as(&l, "two-tmp", "/tmp", None));
    assert_eq!((a, b), (canon("/usr"), canon("/tmp")));
}

#[tokio::test]
async fn we_03_executor_fallback() {
    let l = Local::new(LocalBashConfig { cwd: Some("/tmp".into()), ..s_local() }, ServiceOptions::default());
    assert_eq!(l.run("pwd").await, "/tmp\n");
    let l = Local::default();
    let cwd = std::env::current_dir().expect("cwd");
    assert_eq!(l.run("pwd -P").await, format!("{}\n", std::fs::canonicalize(cwd).expect("canon").display()));
    let spec = l
        .executor
        .resolve(ShellExecRequest { command: "pwd".into(), workdir: Some("/".into()), ..Default::default() })
        .expect("resolve");
    assert_eq!(l.executor.run(spec).await.expect("run").stdout.text, "/\n");
}

fn ambient(extra: &[(&str, &str)]) -> ServiceOptions {
    let mut vars: Vec<(String, String)> =
        ["PATH", "HOME"].iter().filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v))).collect();
    vars.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    ServiceOptions { ambient_env: AmbientEnv::fixed(vars), ..ServiceOptions::default() }
}

#[tokio::test]
async fn we_05_credential_scrub() {
    let l = Local::new(
        s_local(),
        ambient(&[
            ("FOO_API_KEY", "k"),
            ("DB_PASSWORD", "p"),
            ("GH_TOKEN", "t"),
            ("MY_SECRET", "s"),
            ("MONKEY", "m"),
            ("PLAIN_VAR", "v"),
        ]),
    );
    let command = r#"printf "%s|" "${FOO_API_KEY-u}" "${DB_PASSWORD-u}" "${GH_TOKEN-u}" "${MY_SECRET-u}" "${MONKEY-u}" "${PLAIN_VAR-u}"; test -n "$PATH" && test -n "$HOME" && echo ok"#;
    assert_eq!(l.run(command).await, "u|u|u|u|u|v|ok\n");
}

#[tokio::test]
async fn we_06_stale_dsh_scrub_and_managed_values() {
    let l = Local::new(
        s_local(),
        ambient(&[
            ("DSH_STALE", "old"),
            ("dsh_lower", "x"),
            ("DSH_SESSION_ID", "spoofed"),
            ("DSH_HOME", "/elsewhere"),
        ]),
    );
    let command = r#"printf "%s|%s|%s|%s|%s" "${DSH_STALE-u}" "${dsh_lower-u}" "${DSH_SESSION_ID-u}" "$DSH_SHELL" "$DSH_HOME""#;
    assert_eq!(l.run(command).await, "u|u|u|1|/h/dsh");
    let agent = l.h.agent("sess-42", None);
    let r = l.h.call_as(&agent, json!({"command": command, "description": "d"})).await;
    assert_eq!(text(&r), "u|u|sess-42|1|/h/dsh");
}

const WE_07: &str = r#"printf '%s\n%s\n%s\n%s\n%s\n' "$DSH_HOME" "$DSH_SHELL" "$DSH_SESSION_ID" "$DSH_SESSION_JSONL" "${DSH_STALE_PARENT-unset}""#;

#[tokio::test]
async fn we_07_session_jsonl() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().join("sessions");
    let l = Local::new(s_local(), ambient(&[("DSH_STALE_PARENT", "stale")]));
    // Without a persistence backend: unset.
    let agent = l.h.agent("session-env-id", None);
    let r = l.h.call_as(&agent, json!({"command": WE_07, "description": "d"})).await;
    assert_eq!(text(&r), "/h/dsh\n1\nsession-env-id\n\nunset\n");

    l.h.ctx
        .load::<dsh_core::plugins::SessionJsonlPlugin>(dsh_core::plugins::SessionJsonlConfig {
            root: Some(root.to_string_lossy().into_owned()),
            dsh_home: None,
        })
        .expect("jsonl");
    let r = l.h.call_as(&agent, json!({"command": WE_07, "description": "d"})).await;
    let jsonl = root.join("session-env-id.jsonl");
    assert_eq!(text(&r), format!("/h/dsh\n1\nsession-env-id\n{}\nunset\n", jsonl.display()));
    assert!(!jsonl.exists(), "J need not exist yet");
}

#[tokio::test]
async fn we_09_merge_precedence_at_the_executor() {
    let l = Local::default();
    let spec = l
        .executor
        .resolve(ShellExecRequest {
            command: r#"printf "%s|%s" "$DSH_X" "$TERM""#.into(),
            env: Some(
                [("DSH_X".to_owned(), "env".to_owned()), ("TERM".to_owned(), "xterm".to_owned())].into(),
            ),
            dsh_env: Some([("DSH_X".to_owned(), "dsh".to_owned())].into()),
            ..Default::default()
        })
        .expect("resolve");
    assert_eq!(l.executor.run(spec).await.expect("run").stdout.text, "dsh|xterm");
}

#[tokio::test]
async fn jb_01_and_jb_04_background_through_the_runtime() {
    let l = Local::default().with_jobs();
    let r = l.call(bg("echo bg-ok")).await;
    assert_eq!(text(&r), "started background job bash-1");
    assert_eq!(r.value, Some(json!({"kind": "background", "jobId": "bash-1"})));
    let jobs = l.jobs();
    let snapshot = jobs.wait("bash-1", 15_000.0, None, None).await.expect("wait");
    assert_eq!((snapshot.status, snapshot.detail.as_deref()), (JobStatus::Completed, Some("exit code: 0")));
    assert_eq!(jobs.read("bash-1", None).expect("read").0, "bg-ok\n");
    assert_eq!(jobs.read("bash-1", None).expect("read").0, "", "consuming reads never repeat");

    let (_, snapshot) = l.background(bg("kill -TERM $$")).await;
    assert_eq!((snapshot.status, snapshot.detail.as_deref()), (JobStatus::Killed, Some("signal: SIGTERM")));
    let (output, snapshot) = l.background(bg("echo x; exit 3")).await;
    assert_eq!(output, "x\n");
    assert_eq!((snapshot.status, snapshot.detail.as_deref()), (JobStatus::Completed, Some("exit code: 3")));
}

#[tokio::test]
async fn jb_03_kill_through_the_runtime() {
    let l = Local::default().with_jobs();
    assert_eq!(text(&l.call(bg("sleep 60")).await), "started background job bash-1");
    let jobs = l.jobs();
    jobs.kill("bash-1", None, None).expect("kill");
    let snapshot = jobs.wait("bash-1", 15_000.0, None, None).await.expect("wait");
    assert_eq!((snapshot.status, snapshot.detail.as_deref()), (JobStatus::Killed, Some("signal: SIGTERM")));
}

#[tokio::test]
async fn jb_19_lossy_background_read() {
    let dir = tempfile::tempdir().expect("tmp");
    let l = Local::new(LocalBashConfig { max_output_bytes: 100.0, ..s_local() }, spill_options(dir.path()))
        .with_jobs();
    let (output, snapshot) = l.background(bg(LOOP)).await;
    assert_eq!(snapshot.detail.as_deref(), Some("exit code: 0"));
    let prefix = format!("{}[some output was dropped from memory; full output: ", last_lines());
    let path = output.strip_prefix(&prefix).and_then(|p| p.strip_suffix(']')).expect(&output);
    assert!(path.ends_with("-stdout.log"), "{path}");
    assert_eq!(std::fs::read_to_string(path).expect("spill"), all_lines());
}

#[tokio::test]
async fn jb_20_background_spawn_failure() {
    let l = Local::default().with_jobs();
    let args = json!({"command": "true", "description": "d", "workdir": "/nonexistent-dsh", "run_in_background": true});
    let (output, snapshot) = l.background(args).await;
    assert_eq!(
        (snapshot.status, snapshot.detail.as_deref()),
        (JobStatus::Killed, Some("killed before exit"))
    );
    assert!(output.starts_with("[stderr]\nspawn failed: ") && output.contains("ENOENT"), "{output}");
    assert_eq!(l.jobs().read(&snapshot.id, None).expect("read").0, "");
}

#[tokio::test]
async fn jb_21_background_work_is_not_tied_to_the_call_signal() {
    let l = Local::default().with_jobs();
    let signal = AbortSignal::new();
    let r =
        l.h.call_exec(bg("sleep 1; echo later"), ToolExec::new(None, "c").with_signal(signal.clone())).await;
    assert_eq!(text(&r), "started background job bash-1");
    signal.abort_default();
    let jobs = l.jobs();
    let snapshot = jobs.wait("bash-1", 15_000.0, None, None).await.expect("wait");
    assert_eq!((snapshot.status, snapshot.detail.as_deref()), (JobStatus::Completed, Some("exit code: 0")));
    assert_eq!(jobs.read("bash-1", None).expect("read").0, "later\n");
}
