//! `--executor ssh`: the conformance subset through the tool, with commands on a loopback
//! `sshd` the test starts (this machine is the remote host, so the remote side is checked
//! through `/proc`).

use std::path::Path;

use dsh_shell_ssh::fixture::LoopbackSshd;
use serde_json::{Value, json};

use crate::harness::{Run, Sandbox};

/// The options that point a composition at `sshd`.
fn ssh_options(sshd: &LoopbackSshd) -> Vec<String> {
    vec![
        "--executor".into(),
        "ssh".into(),
        "--ssh-host".into(),
        sshd.target().to_string(),
        "--ssh-identity".into(),
        sshd.identity().display().to_string(),
        "--ssh-known-hosts".into(),
        sshd.known_hosts().display().to_string(),
    ]
}

/// `dsh-bash <ssh options> [extra] batch` with one line per request (ids 1, 2, …); the
/// answers in id order.
fn batch(sandbox: &Sandbox, sshd: &LoopbackSshd, extra: &[&str], requests: &[Value]) -> Vec<Value> {
    let mut args: Vec<String> = ssh_options(sshd);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    args.push("batch".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let input: String = requests
        .iter()
        .enumerate()
        .map(|(i, request)| {
            let mut request = request.clone();
            request["id"] = json!(i + 1);
            format!("{request}\n")
        })
        .collect();
    let out = sandbox.run(&args, &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut lines = out.json_lines();
    lines.sort_by_key(|l| l["id"].as_u64());
    assert_eq!(lines.len(), requests.len(), "{}", out.stdout);
    lines
}

fn bash(command: &str) -> Value {
    json!({"tool": "bash", "args": {"command": command, "description": "d"}})
}

fn text(line: &Value) -> &str {
    line["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text: {line}"))
}

/// The processes on this machine whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| {
            entry.file_name().to_str()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(needle).then_some(cmdline)
        })
        .collect()
}

/// No `ssh` master for `sshd`'s port is left.
fn assert_no_master_left(sshd: &LoopbackSshd) {
    let port = format!(" -p {} ", sshd.port());
    let masters: Vec<String> =
        processes_with(&port).into_iter().filter(|c| c.starts_with("ssh ") && c.contains(" -M ")).collect();
    assert_eq!(masters, Vec::<String>::new(), "the master connection outlived the harness");
}

#[test]
fn bf_foreground_results_through_ssh() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let lines = batch(
        &sandbox,
        &sshd,
        &[],
        &[
            json!({"tool": "bash", "args": {"command": "echo hello", "description": "test command", "timeoutMs": 10000}}),
            bash("true"),
            bash("echo out; echo err >&2"),
            bash("printf x; exit 7"),
            bash("kill -TERM $$"),
            bash("kill -KILL $$"),
            bash("sleep 30 & echo shell-done"),
            bash("exit 255"),
            bash("echo \"$DSH_SESSION_ID\" | wc -c; hostname"),
        ],
    );
    assert_eq!(text(&lines[0]), "hello\n");
    assert_eq!(
        lines[0]["structured"],
        json!({"kind": "foreground", "exitCode": 0, "signal": null, "timedOut": false, "aborted": false,
               "timeoutMs": 10000, "stdout": {"text": "hello\n", "truncated": false},
               "stderr": {"text": "", "truncated": false}})
    );
    assert_eq!(text(&lines[1]), "(no output)");
    assert_eq!(text(&lines[2]), "out\n[stderr]\nerr\n");
    assert_eq!(text(&lines[3]), "x\n[exit code: 7]");
    assert_eq!(lines[3]["structured"]["exitCode"], json!(7));
    assert_eq!(text(&lines[4]), "(no output)\n[killed by signal: SIGTERM]");
    assert_eq!(text(&lines[5]), "(no output)\n[killed by signal: SIGKILL]");
    assert_eq!(text(&lines[6]), "shell-done\n");
    // A command's own 255 is an exit, not a lost connection.
    assert_eq!((text(&lines[7]), &lines[7]["isError"]), ("(no output)\n[exit code: 255]", &json!(false)));
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    assert!(text(&lines[8]).ends_with(&format!("\n{}", hostname)), "{}", text(&lines[8]));
    assert_no_master_left(&sshd);
}

#[test]
fn bf_timeouts_kill_the_remote_process_tree() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    // A duration no other process uses marks this call's sleeps on the (local) remote side.
    let marker = format!("6001.{}", std::process::id());
    let tree =
        format!("sleep {marker} & (sleep {marker} &) ; setsid sleep {marker} & echo armed; sleep {marker}");
    let trapped = "trap '' TERM; echo armed; sleep 60";
    let lines = batch(
        &sandbox,
        &sshd,
        &["--config", &sandbox.write("grace.toml", "[shell-ssh]\ngraceMs = 200\n").display().to_string()],
        &[
            json!({"tool": "bash", "args": {"command": "sleep 60", "description": "d", "timeoutMs": 1000}}),
            json!({"tool": "bash", "args": {"command": tree, "description": "d", "timeoutMs": 3000}}),
            json!({"tool": "bash", "args": {"command": trapped, "description": "d", "timeoutMs": 1500}}),
            // The kill comes while the far side is still starting the command: it waits for
            // the command and ends it, so the signal is known.
            json!({"tool": "bash", "args": {"command": "sleep 60", "description": "d", "timeoutMs": 1}}),
        ],
    );
    assert_eq!(text(&lines[0]), "(no output)\n[timed out after 1000ms]\n[killed by signal: SIGTERM]");
    assert_eq!(
        (&lines[0]["structured"]["timedOut"], &lines[0]["structured"]["signal"]),
        (&json!(true), &json!("SIGTERM"))
    );
    assert_eq!(text(&lines[1]), "armed\n[timed out after 3000ms]\n[killed by signal: SIGTERM]");
    assert_eq!(sleeps_left(&marker), Vec::<String>::new(), "a remote process survived");
    assert_eq!(text(&lines[2]), "armed\n[timed out after 1500ms]\n[killed by signal: SIGKILL]");
    assert_eq!(text(&lines[3]), "(no output)\n[timed out after 1ms]\n[killed by signal: SIGTERM]");
    assert_no_master_left(&sshd);
}

/// The spill file a result's text names (`full output: <path>]`).
fn named_spill(text: &str) -> String {
    let start = text.find("full output: ").map(|i| i + "full output: ".len());
    let end = start.and_then(|s| text[s..].find(']').map(|e| s + e));
    match (start, end) {
        (Some(s), Some(e)) => text[s..e].to_owned(),
        _ => panic!("no spill file named in {text:?}"),
    }
}

#[test]
fn bf_08_and_10_output_is_bounded_and_spilled_on_the_host_where_later_commands_read_it() {
    use std::io::{BufRead, Write};
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let spill = sandbox.path().join("spill");
    std::fs::create_dir(&spill).expect("spill dir");
    let config = format!(
        "[shell-ssh]\nmaxOutputBytes = 100\n[subprocess]\nspillDir = {:?}\n",
        spill.display().to_string()
    );
    let config = sandbox.write("bounded.toml", &config).display().to_string();
    let mut args: Vec<String> = ssh_options(&sshd);
    args.extend(["--config".to_owned(), config, "batch".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = sandbox
        .command(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    // One request at a time: a later one names the files an earlier result named.
    let mut ask = |id: usize, request: Value| -> Value {
        let mut request = request;
        request["id"] = json!(id);
        writeln!(stdin, "{request}").expect("request");
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).expect("read") > 0, "batch ended");
        serde_json::from_str(&line).expect("json")
    };
    let tail: String = (91..=100).map(|i| format!("line-{i:04}\n")).collect();
    let all: String = (1..=100).map(|i| format!("line-{i:04}\n")).collect();
    let first = ask(1, bash("for i in $(seq 1 100); do printf \"line-%04d\\n\" $i; done"));
    let stdout_spill = first["structured"]["stdout"]["spillPath"].as_str().expect("a spill path").to_owned();
    assert_eq!(text(&first), format!("{tail}\n[output truncated; full output: {stdout_spill}]"));
    // The result names a file on the host, in a directory of the session's own (not the
    // harness's spill directory, although the host is this machine here).
    assert!(!Path::new(&stdout_spill).starts_with(&spill), "{stdout_spill}");
    let far_dir = Path::new(&stdout_spill).parent().expect("a directory").to_path_buf();
    assert!(
        far_dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("dsh-spill-")),
        "{stdout_spill}"
    );
    let second = ask(2, bash("echo ok; for i in $(seq 1 100); do printf \"line-%04d\\n\" $i >&2; done"));
    let stderr_spill = second["structured"]["stderr"]["spillPath"].as_str().expect("a spill path").to_owned();
    assert!(
        stderr_spill.ends_with("-stderr.log") && stderr_spill.starts_with(&*far_dir.to_string_lossy()),
        "{stderr_spill}"
    );
    assert_eq!(
        text(&second),
        format!("ok\n[stderr]\n{tail}\n[output truncated; full output: {stderr_spill}]")
    );
    // A job's spill file is on the host too.
    ask(
        3,
        json!({"tool": "bash", "args": {"description": "d", "run_in_background": true,
        "command": "for i in $(seq 1 100); do printf \"job-%04d\\n\" $i; done"}}),
    );
    let read = ask(4, json!({"tool": "job_output", "args": {"job_id": "bash-1", "wait": true}}));
    let job_spill = named_spill(text(&read));
    assert!(job_spill.starts_with(&*far_dir.to_string_lossy()), "{}", text(&read));
    // A later command of the session reads all three there, complete; the directory is
    // the session's alone.
    let quoted: Vec<String> =
        [&stdout_spill, &stderr_spill, &job_spill].iter().map(crate::harness::shell_quote).collect();
    let command = format!(
        "for f in {}; do cat \"$f\" | wc -c; done; stat -c %a {}",
        quoted.join(" "),
        crate::harness::shell_quote(far_dir.display())
    );
    let sizes = ask(5, bash(&command));
    let job_all: usize = (1..=100).map(|i| format!("job-{i:04}\n").len()).sum();
    assert_eq!(text(&sizes), format!("{n}\n{n}\n{job_all}\n700\n", n = all.len()));
    drop(stdin);
    assert!(child.wait().expect("wait").success());
    // The session's end removed its directory on the host.
    assert!(!far_dir.exists(), "{} outlived the session", far_dir.display());
    assert_no_master_left(&sshd);
}

#[test]
fn ex_workdirs_on_the_host() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let there = sshd.dir().display().to_string();
    let lines = batch(
        &sandbox,
        &sshd,
        &[],
        &[
            json!({"tool": "bash", "args": {"command": "pwd", "description": "d", "workdir": there}}),
            json!({"tool": "bash", "args": {"command": "true", "description": "d", "workdir": "/nonexistent-dsh"}}),
        ],
    );
    assert_eq!(text(&lines[0]), format!("{there}\n"));
    assert_eq!(lines[1]["isError"], json!(true), "{}", lines[1]);
    assert!(
        text(&lines[1]).contains("ENOENT") || text(&lines[1]).contains("No such file"),
        "{}",
        text(&lines[1])
    );
}

#[test]
fn jb_background_jobs_run_on_the_host() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let background = |command: &str| json!({"tool": "bash", "args": {"command": command, "description": "d", "run_in_background": true}});
    let wait = |id: &str| json!({"tool": "job_output", "args": {"job_id": id, "wait": true}});
    // The remote side is this machine: a foreground call waits until the job's command runs
    // there before it is killed.
    let marker = format!("6002.{}", std::process::id());
    let lines = batch(
        &sandbox,
        &sshd,
        &[],
        &[
            background("echo bg-ok"),
            wait("bash-1"),
            background(&format!("sleep {marker}")),
            bash(&format!("until pgrep -f 'sleep {marker}' >/dev/null; do sleep 0.05; done")),
            json!({"tool": "job_kill", "args": {"job_id": "bash-2"}}),
            wait("bash-2"),
            background("kill -TERM $$"),
            wait("bash-3"),
            background("echo x; exit 3"),
            wait("bash-4"),
            json!({"tool": "job_output", "args": {"job_id": "bash-4"}}),
        ],
    );
    assert_eq!(text(&lines[0]), "started background job bash-1");
    assert_eq!(text(&lines[1]), "bg-ok\n[status: completed, exit code: 0]");
    assert_eq!(text(&lines[4]), "requested cancellation of job bash-2");
    assert_eq!(text(&lines[5]), "(no new output)\n[status: killed, signal: SIGTERM]");
    assert_eq!(sleeps_left(&marker), Vec::<String>::new(), "the killed job survived");
    assert!(text(&lines[7]).ends_with("[status: killed, signal: SIGTERM]"), "{}", text(&lines[7]));
    assert_eq!(text(&lines[9]), "x\n[status: completed, exit code: 3]");
    assert_eq!(text(&lines[10]), "(no new output)\n[status: completed, exit code: 3]");
    assert_no_master_left(&sshd);
}

#[test]
fn an_unknown_host_key_is_refused_with_its_fingerprint() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let empty = sandbox.write("known_hosts", "");
    let target = sshd.target().to_string();
    let args = [
        "--executor",
        "ssh",
        "--ssh-host",
        &target,
        "--ssh-identity",
        &sshd.identity().display().to_string(),
        "--ssh-known-hosts",
        &empty.display().to_string(),
    ];
    let refusal = format!(
        "refused: unknown host key ED25519 {}: not in {} and not added; if that fingerprint is the host's, add its key to that file",
        sshd.host_fingerprint(),
        empty.display()
    );
    let mut call: Vec<&str> = args.to_vec();
    call.extend(["call", "bash", r#"{"command":"echo reached","description":"d"}"#]);
    let out = sandbox.run(&call, "");
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stdout.starts_with("Error: ") && out.stdout.contains(&refusal), "{out:?}");
    assert!(!out.stdout.contains("reached"));
    let mut doctor: Vec<&str> = args.to_vec();
    doctor.push("doctor");
    let out = sandbox.run(&doctor, "");
    assert_eq!(out.code, Some(1), "{out:?}");
    let line = format!("executor: ssh (ssh {target}); does not answer: ssh {target}: {refusal}\n");
    assert!(out.stdout.contains(&line), "{}", out.stdout);
    assert_eq!(std::fs::read_to_string(&empty).expect("known_hosts"), "", "the key was added");
}

#[test]
fn doctor_reports_the_host_and_that_it_answers() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let mut args: Vec<String> = ssh_options(&sshd);
    args.push("doctor".into());
    let out = sandbox.run(&args.iter().map(String::as_str).collect::<Vec<_>>(), "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let uname = std::process::Command::new("uname").arg("-srm").output().expect("uname");
    let line = format!(
        "executor: ssh (ssh {}); {}\nssh known hosts: {} (an unknown host key is refused, never added)\n",
        sshd.target(),
        String::from_utf8_lossy(&uname.stdout).trim(),
        sshd.known_hosts().display()
    );
    assert!(out.stdout.contains(&line), "{}", out.stdout);
    assert!(out.stdout.contains("  shell-ssh (@deepseek-ai/dsh-shell-ssh): applied\n"), "{}", out.stdout);
    assert!(!out.stdout.contains("bash-local (@deepseek-ai/dsh-bash-local): applied"), "{}", out.stdout);
    assert_no_master_left(&sshd);
}

#[test]
fn ssh_options_are_refused_where_they_cannot_apply() {
    let sandbox = Sandbox::new();
    let call = ["call", "bash", r#"{"command":"true","description":"d"}"#];
    let run = |args: &[&str]| -> Run {
        let mut all = args.to_vec();
        all.extend(call);
        sandbox.run(&all, "")
    };
    let out = run(&["--ssh-host", "example.invalid"]);
    assert!(
        out.stderr.contains(
            "--ssh-host, --ssh-identity and --ssh-known-hosts configure the SSH executor: add --executor ssh"
        ),
        "{out:?}"
    );
    let out = run(&["--executor", "ssh", "--ssh-host", "h", "--sandbox", "read-only"]);
    assert!(
        out.stderr.contains(
            "--executor ssh runs commands on another host, where --sandbox cannot confine them: use one or the other"
        ),
        "{out:?}"
    );
    let out = run(&["--executor", "ssh"]);
    assert!(out.stderr.contains("shell-ssh: host is required ([user@]host[:port]; --ssh-host)"), "{out:?}");
    let out = run(&["--executor", "ssh", "--ssh-host=-oProxyCommand=touch"]);
    assert!(out.stderr.contains("not a host name or address"), "{out:?}");
    for out in [run(&["--ssh-host", "h"]), run(&["--executor", "ssh"])] {
        assert_ne!(out.code, Some(0), "{out:?}");
    }
}

/// The `sleep <marker>` commands still running once those ending settled (up to 10 s). Only
/// the `sleep`s count: the call script on the far side, whose command line also holds the
/// command, sends its status frame just before it exits.
fn sleeps_left(marker: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<String> = processes_with(&format!("sleep {marker}"))
            .into_iter()
            .filter(|c| c.starts_with("sleep "))
            .collect();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `count` idle `sleep` processes on this machine, killed on drop.
struct IdleProcesses(Vec<std::process::Child>);

impl IdleProcesses {
    fn spawn(count: usize) -> Self {
        let children = (0..count)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("600")
                    .stdin(std::process::Stdio::null())
                    .spawn()
                    .expect("spawn an idle sleep")
            })
            .collect();
        Self(children)
    }
}

impl Drop for IdleProcesses {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn the_kill_grace_is_time_and_does_not_grow_with_unrelated_processes() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let idle = IdleProcesses::spawn(1000);
    let config = sandbox.write("grace.toml", "[shell-ssh]\ngraceMs = 2000\n").display().to_string();
    let started = std::time::Instant::now();
    let lines = batch(
        &sandbox,
        &sshd,
        &["--config", &config],
        &[
            json!({"tool": "bash", "args": {"command": "trap '' TERM; echo armed; sleep 60", "description": "d", "timeoutMs": 1000}}),
        ],
    );
    let took = started.elapsed();
    drop(idle);
    assert_eq!(text(&lines[0]), "armed\n[timed out after 1000ms]\n[killed by signal: SIGKILL]");
    // 1 s timeout + 2 s grace; a generous bound (3x) that a per-turn scan of every process
    // far exceeds.
    assert!(took < std::time::Duration::from_secs(9), "the timeout and grace took {took:?}");
}

#[test]
fn timeouts_and_kills_work_with_every_channel_of_max_sessions_in_use() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let marker = format!("6003.{}", std::process::id());
    let background = json!({"tool": "bash", "args": {"command": format!("sleep {marker}"), "description": "d", "run_in_background": true}});
    let mut requests: Vec<Value> = (0..9).map(|_| background.clone()).collect();
    // Nine jobs and this call: sshd's ten channels are in use when the timeout comes.
    let nine = format!(
        "until [ \"$(pgrep -cf '^sleep {marker}$')\" -ge 9 ]; do sleep 0.05; done; echo nine; sleep 30"
    );
    requests.extend([
        json!({"tool": "bash", "args": {"command": nine, "description": "d", "timeoutMs": 5000}}),
        json!({"tool": "bash", "args": {"command": format!("touch tenth; sleep {marker}"), "description": "d", "run_in_background": true}}),
    ]);
    let (child, mut stdin) = start_batch(&sandbox, &sshd, &requests);
    // Ten jobs: every channel is in use (a call would find none).
    wait_for_file(&sandbox.path().join("tenth"));
    let rest = [
        json!({"tool": "job_kill", "args": {"job_id": "bash-1"}}),
        json!({"tool": "job_output", "args": {"job_id": "bash-1", "wait": true}}),
        bash(&format!("pgrep -cf '^sleep {marker}$'")),
    ];
    for (i, request) in rest.iter().enumerate() {
        let mut request = request.clone();
        request["id"] = json!(requests.len() + i + 1);
        use std::io::Write;
        writeln!(stdin, "{request}").expect("request");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let mut lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    lines.sort_by_key(|l| l["id"].as_u64());
    assert_eq!(lines.len(), 14, "{lines:?}");
    assert_eq!(text(&lines[9]), "nine\n[timed out after 5000ms]\n[killed by signal: SIGTERM]");
    assert_eq!(text(&lines[11]), "requested cancellation of job bash-1");
    assert_eq!(text(&lines[12]), "(no new output)\n[status: killed, signal: SIGTERM]");
    assert_eq!(text(&lines[13]), "9\n");
    // Teardown ends the other nine, over their own channels or by the end of them.
    assert_eq!(sleeps_left(&marker), Vec::<String>::new(), "a job outlived the harness");
    assert_no_master_left(&sshd);
}

#[test]
fn what_cannot_follow_commands_to_the_host_is_refused_at_start_and_ssh_cwd_sets_the_directory() {
    let sandbox = Sandbox::new();
    let call = ["call", "bash", r#"{"command":"true","description":"d"}"#];
    let refused = |args: &[&str], said: &str| {
        let mut all = args.to_vec();
        all.extend(call);
        let out = sandbox.run(&all, "");
        assert_ne!(out.code, Some(0), "{out:?}");
        // One line, which ends with what is refused (after the file's name, when a file set it).
        assert!(out.stderr.starts_with("dsh-bash: ") && out.stderr.trim_end().ends_with(said), "{out:?}");
        assert_eq!(out.stderr.trim_end().lines().count(), 1, "{out:?}");
    };
    let persist = "--persist keeps the shell's state in a file on this host; with --executor ssh commands run elsewhere, where it cannot follow them: drop --persist (or [tool-bash] persist)";
    refused(&["--executor", "ssh", "--ssh-host", "h", "--persist", "cwd"], persist);
    let table = sandbox.write("persist.toml", "[tool-bash]\npersist = \"env\"\n").display().to_string();
    refused(&["--executor", "ssh", "--ssh-host", "h", "--config", &table], persist);
    refused(
        &["--executor", "container", "--image", "i", "--persist", "env"],
        &persist.replace("--executor ssh", "--executor container"),
    );
    refused(
        &["--executor", "ssh", "--ssh-host", "h", "--workspace-root", "/tmp"],
        "--workspace-root names a directory on this host; with --executor ssh commands run on the host: give its directory with --ssh-cwd",
    );
    refused(&["--ssh-cwd", "/tmp"], "--ssh-cwd configures the SSH executor: add --executor ssh");
    refused(
        &["--executor", "ssh", "--ssh-host", "h", "--ssh-cwd", "relative"],
        "--ssh-cwd relative: not an absolute UTF-8 path (a directory on the host)",
    );
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let there = sshd.dir().display().to_string();
    let lines = batch(&sandbox, &sshd, &["--ssh-cwd", &there], &[bash("pwd")]);
    assert_eq!(text(&lines[0]), format!("{there}\n"));
}

/// `dsh-bash <ssh options> batch` started with `requests` (ids 1, 2, …) on its stdin, which
/// stays open until the returned writer is dropped.
fn start_batch(
    sandbox: &Sandbox,
    sshd: &LoopbackSshd,
    requests: &[Value],
) -> (std::process::Child, std::process::ChildStdin) {
    let mut args: Vec<String> = ssh_options(sshd);
    args.push("batch".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = sandbox
        .command(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    for (i, request) in requests.iter().enumerate() {
        let mut request = request.clone();
        request["id"] = json!(i + 1);
        use std::io::Write;
        writeln!(stdin, "{request}").expect("request");
    }
    (child, stdin)
}

/// Waits (up to 30 s) for `path` to exist.
fn wait_for_file(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_dropped_connection_ends_the_remote_commands_and_keeps_the_output_received() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let marker = format!("6004.{}", std::process::id());
    let job = json!({"tool": "bash", "args": {"command": format!("trap '' TERM; sleep {marker}"), "description": "d", "run_in_background": true}});
    let foreground = bash(&format!("echo partial; touch started; sleep {marker}"));
    let (child, stdin) = start_batch(&sandbox, &sshd, &[job, foreground]);
    wait_for_file(&sandbox.path().join("started"));
    assert!(sshd.drop_connections() > 0, "no connection to drop");
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let lost = lines.iter().find(|l| l["id"] == json!(2)).expect("the foreground result");
    assert_eq!(lost["isError"], json!(true), "{lost}");
    assert!(text(lost).contains("lost the connection to the host"), "{}", text(lost));
    assert!(text(lost).ends_with("; its output until then:\npartial"), "{}", text(lost));
    // The far side ended both commands (the job ignores TERM: KILL after the grace).
    assert_eq!(sleeps_left(&marker), Vec::<String>::new(), "a command outlived its connection");
}

#[test]
fn a_killed_harness_leaves_no_command_running_on_the_host() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let marker = format!("6005.{}", std::process::id());
    let job = json!({"tool": "bash", "args": {"command": format!("sleep {marker}"), "description": "d", "run_in_background": true}});
    let foreground = bash(&format!("touch started; sleep {marker}"));
    let (mut child, stdin) = start_batch(&sandbox, &sshd, &[job, foreground]);
    wait_for_file(&sandbox.path().join("started"));
    child.kill().expect("SIGKILL the harness");
    let _ = child.wait();
    drop(stdin);
    assert_eq!(sleeps_left(&marker), Vec::<String>::new(), "a command outlived the harness");
}

#[test]
fn input_a_job_does_not_read_holds_up_neither_its_kill_nor_its_later_reads() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let sandbox = Sandbox::new();
    let marker = format!("6006.{}", std::process::id());
    // More than a pipe holds, to a job that does not read it yet, then to one that does.
    let chunk: String = "x".repeat(16 * 1024) + "\n";
    let input = |job: &str| json!({"tool": "job_input", "args": {"job_id": job, "text": chunk}});
    let mut requests = vec![
        json!({"tool": "bash", "args": {"command": format!("sleep {marker}"), "description": "d", "run_in_background": true}}),
        json!({"tool": "bash", "args": {"command": "sleep 1; wc -c", "description": "d", "run_in_background": true}}),
    ];
    for _ in 0..8 {
        requests.extend([input("bash-1"), input("bash-2")]);
    }
    requests.extend([
        json!({"tool": "job_kill", "args": {"job_id": "bash-1"}}),
        json!({"tool": "job_output", "args": {"job_id": "bash-1", "wait": true}}),
        json!({"tool": "job_input", "args": {"job_id": "bash-2", "close_stdin": true}}),
        json!({"tool": "job_output", "args": {"job_id": "bash-2", "wait": true}}),
    ]);
    let lines = batch(&sandbox, &sshd, &["--interactive"], &requests);
    let n = requests.len();
    assert_eq!(text(&lines[n - 3]), "(no new output)\n[status: killed, signal: SIGTERM]");
    assert_eq!(text(&lines[n - 4]), "requested cancellation of job bash-1");
    // `job_input` shows what the job printed since; all of it reached the reading job.
    let shown: String = lines.iter().map(text).collect();
    assert!(shown.contains(&format!("{}\n", 8 * (16 * 1024 + 1))), "{shown}");
    assert!(text(&lines[n - 1]).ends_with("[status: completed, exit code: 0]"), "{}", text(&lines[n - 1]));
    assert_eq!(sleeps_left(&marker), Vec::<String>::new(), "the killed job survived");
}
