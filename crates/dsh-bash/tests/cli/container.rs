//! `--executor container`: the bash tool's host-independent conformance cases through one
//! container per session, containment inside it, limits, network and teardown.
//!
//! These need a Docker-compatible engine answering on the local socket and the test image
//! (`scripts/container-test-image`, built here when missing). Without them the tests skip,
//! saying why, unless `CI=true` or `DSH_CONTAINER_REQUIRE=1`: then they fail.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Run, Sandbox, output};

/// The test image (built from this host's programs by `scripts/container-test-image`).
const IMAGE: &str = "dsh-bash-test:minimal";

/// Whether the engine answers and the test image exists (built when missing); otherwise
/// skips, or fails when an engine is required.
fn engine() -> bool {
    let required = std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("DSH_CONTAINER_REQUIRE").is_ok_and(|v| v == "1");
    let reason = match Command::new("docker").args(["version", "--format", "{{.Server.Version}}"]).output() {
        Err(e) => format!("the docker client cannot run: {e}"),
        Ok(out) if !out.status.success() => {
            format!("the container engine does not answer: {}", String::from_utf8_lossy(&out.stderr).trim())
        }
        Ok(_) => {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/container-test-image");
            match Command::new(script).arg(IMAGE).output() {
                Ok(out) if out.status.success() => return true,
                Ok(out) => {
                    format!("the test image cannot be built: {}", String::from_utf8_lossy(&out.stderr).trim())
                }
                Err(e) => format!("the test image cannot be built: {e}"),
            }
        }
    };
    assert!(!required, "a container engine is required (CI=true or DSH_CONTAINER_REQUIRE=1): {reason}");
    eprintln!("SKIP: {reason}");
    false
}

fn container_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--executor", "container", "--image", IMAGE];
    args.extend_from_slice(extra);
    args
}

/// Runs `batch` through the container executor with `extra` switches; the result lines.
fn batch(sandbox: &Sandbox, extra: &[&str], requests: &[Value]) -> Vec<Value> {
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let mut args = container_args(extra);
    args.push("batch");
    let out = sandbox.run(&args, &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    assert_eq!(lines.len(), requests.len(), "{out:?}");
    lines
}

/// `batch` through the container executor, started with `requests` written; its stdin is
/// returned open (dropping it ends the batch once the requests are answered).
fn start_batch(
    sandbox: &Sandbox,
    requests: &[Value],
    stdout: std::process::Stdio,
) -> (std::process::Child, std::process::ChildStdin) {
    use std::io::Write;
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let mut args = container_args(&[]);
    args.push("batch");
    let mut child =
        sandbox.command(&args).stdin(std::process::Stdio::piped()).stdout(stdout).spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("requests");
    (child, stdin)
}

/// Waits (at most `limit`) until the running command has made `started` in the workspace.
fn wait_until_started(sandbox: &Sandbox, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !sandbox.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bash(id: u32, command: &str) -> Value {
    json!({"tool": "bash", "id": id, "args": {"command": command, "description": "d"}})
}

fn text(line: &Value) -> &str {
    line["content"][0]["text"].as_str().expect("text")
}

/// A composition file with `table` as the container executor's config; its path.
fn config(sandbox: &Sandbox, table: &str) -> String {
    let path = sandbox.write("container.toml", &format!("[shell-container]\n{table}"));
    path.to_str().expect("utf-8").to_owned()
}

/// The containers labelled as this harness process's.
fn containers_of(pid: u32) -> Vec<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    let filter = format!("label=dev.dsh-bash.harness={}/{pid}", boot.trim());
    let out = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output().expect("docker ps");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn bf_cases_pass_through_the_container_executor() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let config = config(&sandbox, "graceMs = 200\n");
    let started = Instant::now();
    let lines = batch(
        &sandbox,
        &["--config", &config],
        &[
            bash(1, "echo hello"),
            bash(2, "true"),
            bash(3, "echo out; echo err >&2"),
            bash(4, "printf out; printf err >&2"),
            bash(5, "printf x; exit 7"),
            json!({"tool": "bash", "id": 6, "args": {"command": "sleep 60", "description": "d", "timeoutMs": 100}}),
            json!({"tool": "bash", "id": 7,
                   "args": {"command": "trap '' TERM; echo armed; sleep 60", "description": "d", "timeoutMs": 500}}),
            bash(8, "kill -TERM $$"),
            bash(9, "kill -KILL $$"),
            bash(10, "sleep 30 & echo shell-done"),
            bash(11, "exit 143"),
        ],
    );
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(text(&lines[0]), "hello\n");
    assert_eq!(
        lines[0]["structured"],
        json!({"kind": "foreground", "exitCode": 0, "signal": null, "timedOut": false, "aborted": false,
               "timeoutMs": 120000, "stdout": {"text": "hello\n", "truncated": false},
               "stderr": {"text": "", "truncated": false}})
    );
    let texts: Vec<&str> = lines[1..].iter().map(text).collect();
    assert_eq!(
        texts,
        [
            "(no output)",
            "out\n[stderr]\nerr\n",
            "out\n[stderr]\nerr",
            "x\n[exit code: 7]",
            "(no output)\n[timed out after 100ms]\n[killed by signal: SIGTERM]",
            "armed\n[timed out after 500ms]\n[killed by signal: SIGKILL]",
            "(no output)\n[killed by signal: SIGTERM]",
            "(no output)\n[killed by signal: SIGKILL]",
            "shell-done\n",
            "(no output)\n[exit code: 143]",
        ]
    );
    assert_eq!(lines[5]["structured"]["timedOut"], json!(true));
}

#[test]
fn bf_08_truncated_output_spills_in_the_container_and_the_command_reads_it_there() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let spill_dir = tempfile::tempdir().expect("tempdir");
    let spill = spill_dir.path().to_str().expect("utf-8");
    let path = sandbox.write(
        "container.toml",
        &format!("[subprocess]\nspillDir = \"{spill}\"\n[shell-container]\nmaxOutputBytes = 100\n"),
    );
    let background = json!({"tool": "bash", "id": 4, "args": {"description": "d", "run_in_background": true,
        "command": r#"for i in $(seq 1 100); do printf "job-%04d\n" $i; done"#}});
    let lines = batch(
        &sandbox,
        &["--config", path.to_str().expect("utf-8")],
        &[
            bash(1, r#"for i in $(seq 1 100); do printf "line-%04d\n" $i; done"#),
            // The session's spill files are in its own container's /tmp; the harness's spill
            // directory is not in the container at all.
            bash(2, "for f in /tmp/dsh-spill-*/*-stdout.log; do echo \"$f\"; cat \"$f\" | wc -c; done"),
            bash(3, &format!("ls {spill} >/dev/null 2>&1 || echo not-bound")),
            background,
            json!({"tool": "job_output", "id": 5, "args": {"job_id": "bash-1", "wait": true}}),
            bash(6, "cat /tmp/dsh-spill-*/*-stdout.log | wc -c"),
        ],
    );
    let all: String = (1..=100).map(|i| format!("line-{i:04}\n")).collect();
    let path = lines[0]["structured"]["stdout"]["spillPath"].as_str().expect("spill path");
    assert!(path.starts_with("/tmp/dsh-spill-") && !path.starts_with(spill), "{path}");
    assert_eq!(text(&lines[0]), format!("{}\n[output truncated; full output: {path}]", &all[900..]));
    assert_eq!(text(&lines[1]), format!("{path}\n{}\n", all.len()));
    assert_eq!(text(&lines[2]), "not-bound\n");
    // A job's read names its spill file in the container too, complete once it settled.
    let job = text(&lines[4]);
    let job_path = spill_path(job);
    assert!(job_path.starts_with("/tmp/dsh-spill-") && job_path != path, "{job}");
    let job_all: usize = (1..=100).map(|i| format!("job-{i:04}\n").len()).sum();
    assert_eq!(text(&lines[5]), format!("{}\n", all.len() + job_all));
}

#[test]
fn jb_cases_background_jobs_run_in_the_container() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let background = |id: u32, command: &str| json!({"tool": "bash", "id": id, "args": {"command": command, "description": "d", "run_in_background": true}});
    let wait =
        |id: u32, job: &str| json!({"tool": "job_output", "id": id, "args": {"job_id": job, "wait": true}});
    let lines = batch(
        &sandbox,
        &[],
        &[
            background(1, "echo bg-ok"),
            wait(2, "bash-1"),
            wait(3, "bash-1"),
            background(4, "sleep 60"),
            json!({"tool": "job_kill", "id": 5, "args": {"job_id": "bash-2"}}),
            wait(6, "bash-2"),
            background(7, "kill -TERM $$"),
            wait(8, "bash-3"),
            background(9, "echo x; exit 3"),
            wait(10, "bash-4"),
            json!({"tool": "bash", "id": 11,
                   "args": {"command": "true", "description": "d", "workdir": "/nonexistent-dsh", "run_in_background": true}}),
            wait(12, "bash-5"),
        ],
    );
    let texts: Vec<&str> = lines.iter().map(text).collect();
    assert_eq!(texts[0], "started background job bash-1");
    assert_eq!(texts[1], "bg-ok\n[status: completed, exit code: 0]");
    assert_eq!(texts[2], "(no new output)\n[status: completed, exit code: 0]");
    assert_eq!(texts[4], "requested cancellation of job bash-2");
    assert!(texts[5].ends_with("[status: killed, signal: SIGTERM]"), "{}", texts[5]);
    assert!(texts[7].ends_with("[status: killed, signal: SIGTERM]"), "{}", texts[7]);
    assert_eq!(texts[9], "x\n[status: completed, exit code: 3]");
    assert_eq!(
        texts[11],
        "[stderr]\nspawn failed: Error: spawn bash ENOENT: working directory /nonexistent-dsh does not exist\n[status: killed, killed before exit]"
    );
}

#[test]
fn a_setsid_or_double_fork_escape_dies_with_its_call_inside_the_container() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let lines = batch(
        &sandbox,
        &[],
        &[
            bash(1, "setsid sleep 300 & (sleep 301 &); sleep 0.3; ps -eo args | grep -c '^sleep 30[01]$'"),
            bash(2, "ps -eo args | grep -c '^sleep 30[01]$'"),
        ],
    );
    assert_eq!(text(&lines[0]), "2\n", "both escapes ran");
    assert_eq!(text(&lines[1]), "0\n[exit code: 1]", "the escapes died with their call");
}

#[test]
fn a_memory_hog_under_a_limit_is_reported_as_out_of_memory() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let lines = batch(
        &sandbox,
        &["--memory", "256m"],
        &[bash(1, "head -c 2G /dev/zero | tail"), bash(2, "echo fine")],
    );
    assert!(text(&lines[0]).ends_with("\n[killed: out of memory]\n[exit code: 137]"), "{}", text(&lines[0]));
    assert_eq!(lines[0]["structured"]["outOfMemory"], json!(true));
    assert_eq!(text(&lines[1]), "fine\n");
    assert_eq!(lines[1]["structured"].get("outOfMemory"), None);
}

#[test]
fn network_deny_cannot_reach_a_listener_on_the_host() {
    if !engine() {
        return;
    }
    let listener = std::net::TcpListener::bind("0.0.0.0:0").expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    let hosts = String::from_utf8(Command::new("hostname").arg("-I").output().expect("hostname -I").stdout)
        .expect("utf-8");
    let mut targets = vec!["127.0.0.1".to_owned()];
    targets.extend(hosts.split_whitespace().filter(|h| !h.contains(':')).map(str::to_owned));
    let probe: String = targets
        .iter()
        .map(|host| format!("(exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null && echo reached {host}; "))
        .collect();
    let sandbox = Sandbox::new();
    let lines = batch(&sandbox, &["--network", "deny"], &[bash(1, &format!("{probe}ls /sys/class/net"))]);
    assert_eq!(text(&lines[0]), "lo\n");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection came"
    );
}

#[test]
fn the_container_lives_while_the_harness_runs_and_teardown_removes_it() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let mut args = container_args(&[]);
    args.extend(["call", "bash", r#"{"command":"touch started; sleep 3; echo done","description":"d"}"#]);
    let child = sandbox
        .command(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let child = child.expect("spawn");
    let pid = child.id();
    wait_until_started(&sandbox, Duration::from_secs(20));
    assert_eq!(containers_of(pid).len(), 1, "one labelled container while the harness runs");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(containers_of(pid), Vec::<String>::new(), "teardown removed the container");
}

#[test]
fn containers_left_by_a_harness_that_is_gone_are_removed_on_start() {
    if !engine() {
        return;
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    // A pid that cannot be alive: above the kernel's limit.
    let label = format!("dev.dsh-bash.harness={}/4194305", boot.trim());
    let host = format!("dev.dsh-bash.host={}", this_host());
    let created = Command::new("docker")
        .args(["create", "--label", &label, "--label", &host, IMAGE, "sleep", "300"])
        .output()
        .expect("docker run");
    assert!(created.status.success(), "{created:?}");
    let leftover = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let out = Sandbox::new()
        .run(&container_args(&["call", "bash", r#"{"command":"echo ok","description":"d"}"#]), "");
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    let inspect = Command::new("docker").args(["inspect", &leftover]).output().expect("docker inspect");
    assert!(!inspect.status.success(), "the leftover container {leftover} is still there");
}

#[test]
fn a_container_that_dies_mid_call_is_said_and_the_next_call_gets_a_new_one() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let requests = [bash(1, "echo before; touch started; sleep 30"), bash(2, "echo again")];
    let (child, stdin) = start_batch(&sandbox, &requests, std::process::Stdio::piped());
    drop(stdin);
    wait_until_started(&sandbox, Duration::from_secs(30));
    let ours = containers_of(child.id());
    assert_eq!(ours.len(), 1, "{ours:?}");
    let killed = Command::new("docker").args(["kill", &ours[0]]).output().expect("docker kill");
    assert!(killed.status.success(), "{killed:?}");
    let out = child.wait_with_output().expect("wait");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let first = lines.iter().find(|l| l["id"] == json!(1)).expect("first");
    let second = lines.iter().find(|l| l["id"] == json!(2)).expect("second");
    assert!(text(first).starts_with("before\n"), "{}", text(first));
    assert!(text(first).contains(" went away during the call]\n"), "{}", text(first));
    assert_eq!(text(second), "again\n");
}

/// This host as the host label spells it: `<machine id>/<host name>`.
fn this_host() -> String {
    let machine = std::fs::read_to_string("/etc/machine-id").expect("machine id");
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    format!("{}/{}", machine.trim(), name.trim())
}

#[test]
fn containers_of_another_host_sharing_the_engine_are_left_alone() {
    if !engine() {
        return;
    }
    // Another host's harness: its boot id is not ours, its pid may be anything (here, one
    // not running on this host); once without a host label, once with another host's.
    let label = "dev.dsh-bash.harness=00000000-0000-4000-8000-000000000000/4194305";
    let mut others = Vec::new();
    for host in [None, Some("dev.dsh-bash.host=another-machine/another-host")] {
        let mut args = vec!["run", "-d", "--label", label];
        args.extend(host.map(|h| ["--label", h]).into_iter().flatten());
        args.extend([IMAGE, "sleep", "300"]);
        let created = Command::new("docker").args(&args).output().expect("docker run");
        assert!(created.status.success(), "{created:?}");
        others.push(String::from_utf8_lossy(&created.stdout).trim().to_owned());
    }
    let out = Sandbox::new()
        .run(&container_args(&["call", "bash", r#"{"command":"echo ok","description":"d"}"#]), "");
    let survived: Vec<bool> = others
        .iter()
        .map(|id| {
            Command::new("docker").args(["inspect", id]).output().expect("docker inspect").status.success()
        })
        .collect();
    for id in &others {
        let _ = Command::new("docker").args(["rm", "-f", id]).output();
    }
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    assert_eq!(survived, [true, true], "the sweep removed another host's container");
}

#[test]
fn doctor_reports_the_executor_and_whether_the_engine_answers() {
    if !engine() {
        return;
    }
    let out = Sandbox::new().run(&container_args(&["doctor"]), "");
    let line = out.stdout.lines().find(|l| l.starts_with("executor: ")).expect("executor line");
    assert!(line.starts_with("executor: container (container dsh-"), "{line}");
    assert!(line.contains(&format!("(image {IMAGE})); ")) && line.ends_with(" answers"), "{line}");
    let sandbox = Sandbox::new();
    let mut command = sandbox.command(&container_args(&["doctor"]));
    command.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let out = output(command, b"");
    assert_eq!(out.code, Some(1), "{out:?}");
    let line = out.stdout.lines().find(|l| l.starts_with("executor: ")).expect("executor line");
    assert!(
        line.ends_with("; does not answer: the container engine cannot be reached: Socket not found: /nonexistent/docker.sock"),
        "{line}"
    );
}

/// An image the engine does not have is not reported as an executor that answers: the
/// verdict is `unusable` and the exit status 1; so is a named container that is not there.
#[test]
fn doctor_reports_a_missing_image_or_container_as_unusable() {
    if !engine() {
        return;
    }
    let image = "dsh-bash-test:no-such-image";
    let out = Sandbox::new().run(&["--executor", "container", "--image", image, "doctor"], "");
    assert_eq!(out.code, Some(1), "{out:?}");
    let line = out.stdout.lines().find(|l| l.starts_with("executor: ")).expect("executor line");
    assert!(
        line.contains(&format!("; answers, but cannot run commands: image {image} is not on the engine")),
        "{line}"
    );
    assert!(!line.ends_with(" answers"), "{line}");
    assert!(out.stdout.lines().last().is_some_and(|l| l.starts_with("unusable: ")), "{out:?}");
    let out = Sandbox::new()
        .run(&["--executor", "container", "--container", "dsh-no-such-container", "doctor"], "");
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stdout.contains("cannot run commands: container dsh-no-such-container is not on the engine"),
        "{out:?}"
    );
}

#[test]
fn the_local_executor_is_the_default_and_container_options_need_the_container_executor() {
    let out = Sandbox::new().run(&["doctor"], "");
    assert!(out.stdout.lines().any(|l| l == "executor: local"), "{out:?}");
    let refused = |args: &[&str]| -> Run { Sandbox::new().run(args, "") };
    let out = refused(&["--image", IMAGE, "call", "bash", r#"{"command":"true","description":"d"}"#]);
    assert_eq!(
        out.stderr.trim_end(),
        "dsh-bash: --image configures the container executor: add --executor container"
    );
    let out = refused(&["--executor", "ssh", "doctor"]);
    assert_eq!(
        out.stderr.trim_end(),
        "dsh-bash: shell-ssh: host is required ([user@]host[:port]; --ssh-host)"
    );
    let out = refused(&["--executor", "container", "--sandbox", "read-only", "doctor"]);
    assert_eq!(
        out.stderr.trim_end(),
        "dsh-bash: --executor container does not combine with --sandbox: the container is the confinement"
    );
    let out = refused(&["--executor", "container", "--image", IMAGE, "--askpass", "doctor"]);
    assert_eq!(
        out.stderr.trim_end(),
        "dsh-bash: --askpass answers programs on this host; with --executor container commands run elsewhere, where its program and socket are not"
    );
    let out = refused(&["--executor", "container", "doctor"]);
    assert!(out.stderr.contains("shell-container: set image (to create the session's container) or container (to use a running one)"), "{out:?}");
}

#[test]
fn nothing_of_the_harness_environment_reaches_the_container_and_input_reaches_a_job() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let requests = [
        bash(1, "echo \"${HARNESS_ONLY_VALUE-unset} $TERM $NO_COLOR\""),
        json!({"tool": "bash", "id": 2,
               "args": {"command": "read -r line; echo \"got $line\"", "description": "d", "run_in_background": true}}),
        json!({"tool": "job_input", "id": 3, "args": {"job_id": "bash-1", "text": "yes\n"}}),
        json!({"tool": "job_output", "id": 4, "args": {"job_id": "bash-1", "wait": true}}),
    ];
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let mut args = container_args(&["--interactive"]);
    args.push("batch");
    let mut command = sandbox.command(&args);
    command.env("HARNESS_ONLY_VALUE", "visible-to-the-harness");
    let out = output(command, input.as_bytes());
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    assert_eq!(text(&lines[0]), "unset dumb 1\n");
    // `job_input` shows what the job printed since; `job_output` the rest.
    let shown = format!("{}{}", text(&lines[2]), text(&lines[3]));
    assert_eq!(shown.matches("got yes\n").count(), 1, "{shown}");
    assert!(text(&lines[3]).ends_with("[status: completed, exit code: 0]"), "{shown}");
}

#[test]
fn a_killed_harness_leaves_no_command_running_in_its_container() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let marker = format!("6007.{}", std::process::id());
    let requests = [
        json!({"tool": "bash", "id": 1, "args": {"command": format!("sleep {marker}"), "description": "d", "run_in_background": true}}),
        bash(2, &format!("touch started; sleep {marker}")),
    ];
    let (mut child, stdin) = start_batch(&sandbox, &requests, std::process::Stdio::null());
    wait_until_started(&sandbox, Duration::from_secs(30));
    let ours = containers_of(child.id());
    assert_eq!(ours.len(), 1, "{ours:?}");
    child.kill().expect("SIGKILL the harness");
    let _ = child.wait();
    drop(stdin);
    // The container outlives a killed harness (the next one's sweep removes it); the
    // commands in it do not.
    let pattern = format!("^sleep {marker}$");
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = loop {
        let out =
            Command::new("docker").args(["exec", &ours[0], "pgrep", "-f", &pattern]).output().expect("exec");
        let left = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = Command::new("docker").args(["rm", "-f", &ours[0]]).output();
    assert_eq!(left, "", "a command outlived the harness in its container");
}

/// `dsh-bash --executor container mcp --http` in its own process group, its authority and
/// token; ended with `SIGTERM` when dropped.
struct HttpContainerServer {
    child: std::process::Child,
    authority: String,
    token: String,
}

impl HttpContainerServer {
    fn start(sandbox: &Sandbox) -> Self {
        Self::start_with(sandbox, &[])
    }

    /// Started with the container switches `extra` too.
    fn start_with(sandbox: &Sandbox, extra: &[&str]) -> Self {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let token = format!("token-{}", std::process::id());
        let token_file = sandbox.write("mcp-token", &format!("{token}\n"));
        let mut args = container_args(extra);
        args.extend(["mcp", "--http", "127.0.0.1:0", "--token-file", token_file.to_str().expect("utf-8")]);
        let mut command = sandbox.command(&args);
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).process_group(0);
        let mut child = command.spawn().expect("spawn dsh-bash mcp --http");
        let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("the start line");
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let authority = dsh_test_support::http::start_line_authority(&line)
            .unwrap_or_else(|| panic!("no start line: {line:?}"));
        HttpContainerServer { child, authority, token }
    }
}

impl Drop for HttpContainerServer {
    fn drop(&mut self) {
        let group = i32::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill has no memory preconditions; the group is the server's own.
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The text of a `tools/call` reply.
fn reply_text(reply: &dsh_test_support::http::Reply, id: u64) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let response = reply.response(id).unwrap_or_else(|| panic!("no response {id} in {}", reply.body));
    response["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {response}"))
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

/// The spill file a truncated result's text names.
fn spill_path(text: &str) -> String {
    let start = text.find("full output: ").map(|i| i + "full output: ".len());
    let end = start.and_then(|s| text[s..].find(']').map(|e| s + e));
    match (start, end) {
        (Some(s), Some(e)) => text[s..e].to_owned(),
        _ => panic!("no spill file named in {text:?}"),
    }
}

#[test]
fn two_mcp_sessions_of_one_server_share_neither_tmp_nor_processes_nor_spill_files() {
    use dsh_test_support::http::Conn;
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let server = HttpContainerServer::start(&sandbox);
    let patience = Duration::from_secs(120);
    let mut a = Conn::open(&server.authority, &server.token, patience).expect("connect a");
    let mut b = Conn::open(&server.authority, &server.token, patience).expect("connect b");
    let session_a = a.open_session("a").expect("session a");
    let session_b = b.open_session("b").expect("session b");
    let call = |conn: &mut Conn, session: &str, id: u64, args: Value| {
        reply_text(&conn.call(session, id, "bash", args).expect("tools/call"), id)
    };
    let command = |command: &str| json!({"command": command, "description": "d", "timeoutMs": 60000});
    // Session a leaves a file in /tmp and a process running (a background job).
    call(&mut a, &session_a, 1, command("echo only-a > /tmp/left-by-a"));
    call(
        &mut a,
        &session_a,
        2,
        json!({"command": "exec -a sleeper-of-a sleep 600", "description": "d", "run_in_background": true}),
    );
    let sees_sleeper = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleeper-of-a' || true";
    let mut seen_by_a = String::new();
    for _ in 0..200 {
        seen_by_a = call(&mut a, &session_a, 3, command(sees_sleeper));
        if seen_by_a.trim() == "1" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(seen_by_a.trim(), "1", "session a sees its own job");
    // Session b sees neither.
    let tmp = call(&mut b, &session_b, 4, command("cat /tmp/left-by-a 2>&1 || echo no-file"));
    assert!(tmp.contains("no-file") && !tmp.contains("only-a"), "b read a's /tmp: {tmp}");
    let procs = call(&mut b, &session_b, 5, command(sees_sleeper));
    assert_eq!(procs.trim(), "0", "b sees a's processes");
    // The spill file a result names is readable by a later command of the same session.
    let big = call(&mut a, &session_a, 6, command("seq 1 200000"));
    let path = spill_path(&big);
    let read =
        call(&mut a, &session_a, 7, command(&format!("tail -n 1 {}", crate::harness::shell_quote(&path))));
    assert_eq!(read.trim(), "200000", "the spill file {path} read in the container");
    // Another session's container cannot read it: it is in a's container only.
    let probe = format!(
        "cat {} >/dev/null 2>&1 && echo readable || echo unreadable",
        crate::harness::shell_quote(&path)
    );
    let other = call(&mut b, &session_b, 10, command(&probe));
    assert_eq!(other.trim(), "unreadable", "session b read a's spill file {path}");
    // One container each; the one of a session that ends goes with it, the other stays.
    let harness = server.child.id();
    assert_eq!(containers_of(harness).len(), 2, "one container per session");
    assert!((200..300).contains(&a.delete(&session_a).expect("DELETE the session")));
    let deadline = Instant::now() + Duration::from_secs(60);
    while containers_of(harness).len() != 1 {
        assert!(Instant::now() < deadline, "the ended session's container was not removed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let still = call(&mut b, &session_b, 8, command("echo b-still-runs"));
    assert_eq!(still.trim(), "b-still-runs");
    drop(server);
    assert!(containers_of(harness).is_empty(), "the harness's end removes the rest");
}

/// One `dsh-bash --executor container mcp` (stdio) whose client offers `root` as its only
/// root; the text of one `bash` call of `command`.
fn stdio_call_with_root(sandbox: &Sandbox, root: &std::path::Path, command: &str) -> String {
    use std::io::{BufRead, Write};
    let mut args = container_args(&[]);
    args.push("mcp");
    let mut child = sandbox
        .command(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn dsh-bash mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |message: Value| writeln!(stdin, "{message}").expect("write");
    send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": false}},
        "clientInfo": {"name": "rooted", "version": "0"}}}));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "bash",
        "arguments": {"command": command, "description": "d", "timeoutMs": 60000}}}));
    let uri = format!("file://{}", root.display());
    let mut line = String::new();
    let text = loop {
        line.clear();
        assert!(stdout.read_line(&mut line).expect("read") > 0, "the server ended");
        let message: Value = serde_json::from_str(&line).expect("json");
        if message["method"] == json!("roots/list") {
            send(json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": [{"uri": uri}]}}));
        } else if message["id"] == json!(1) {
            break message["result"]["content"][0]["text"].as_str().expect("text").to_owned();
        }
    };
    drop(stdin);
    let _ = child.wait();
    text
}

/// One `dsh-bash --executor container mcp` (stdio) whose client offers `roots`; the texts of
/// one `bash` call of each `(command, workdir)` in turn.
fn stdio_calls_with_roots(
    sandbox: &Sandbox,
    roots: &[&std::path::Path],
    calls: &[(&str, Option<&std::path::Path>)],
) -> Vec<String> {
    use std::io::{BufRead, Write};
    let mut args = container_args(&[]);
    args.push("mcp");
    let mut child = sandbox
        .command(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn dsh-bash mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |message: Value| writeln!(stdin, "{message}").expect("write");
    send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": false}},
        "clientInfo": {"name": "rooted", "version": "0"}}}));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let uris: Vec<Value> = roots.iter().map(|r| json!({"uri": format!("file://{}", r.display())})).collect();
    let mut texts = Vec::new();
    for (i, (command, workdir)) in calls.iter().enumerate() {
        let id = i + 1;
        let mut arguments = json!({"command": command, "description": "d", "timeoutMs": 60000});
        if let Some(dir) = workdir {
            arguments["workdir"] = json!(dir.display().to_string());
        }
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": arguments}}));
        let mut line = String::new();
        let text = loop {
            line.clear();
            assert!(stdout.read_line(&mut line).expect("read") > 0, "the server ended");
            let message: Value = serde_json::from_str(&line).expect("json");
            if message["method"] == json!("roots/list") {
                send(json!({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": uris}}));
            } else if message["id"] == json!(id) {
                break message["result"]["content"][0]["text"].as_str().expect("text").to_owned();
            }
        };
        texts.push(text);
    }
    drop(stdin);
    let _ = child.wait();
    texts
}

#[test]
fn every_mcp_root_of_a_session_is_in_its_container() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let (first, second) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let first = std::fs::canonicalize(first.path()).expect("canonical");
    let second = std::fs::canonicalize(second.path()).expect("canonical");
    std::fs::write(second.join("marker"), "in-the-second-root\n").expect("marker");
    let texts = stdio_calls_with_roots(
        &sandbox,
        &[&first, &second],
        &[
            ("pwd; echo one > made-in-first", None),
            ("pwd; cat marker; echo two > made-in-second", Some(&second)),
        ],
    );
    assert_eq!(texts[0], format!("{}\n", first.display()));
    assert_eq!(texts[1], format!("{}\nin-the-second-root\n", second.display()));
    assert_eq!(std::fs::read_to_string(first.join("made-in-first")).expect("written"), "one\n");
    assert_eq!(std::fs::read_to_string(second.join("made-in-second")).expect("written"), "two\n");
}

#[test]
fn an_mcp_session_whose_root_is_another_directory_runs_there() {
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(elsewhere.path()).expect("canonical");
    std::fs::write(root.join("marker"), "in-the-root\n").expect("marker");
    let text = stdio_call_with_root(&sandbox, &root, "pwd; cat marker; echo written > made-here");
    assert_eq!(text, format!("{}\nin-the-root\n", root.display()), "{text}");
    assert_eq!(std::fs::read_to_string(root.join("made-here")).expect("written in the root"), "written\n");
}

#[test]
fn a_warm_container_is_ready_before_a_session_and_serves_its_first_call() {
    use dsh_test_support::http::Conn;
    if !engine() {
        return;
    }
    let sandbox = Sandbox::new();
    let server = HttpContainerServer::start_with(&sandbox, &["--container-warm", "1"]);
    let harness = server.child.id();
    // The pool fills before any session exists.
    let deadline = Instant::now() + Duration::from_secs(60);
    let warm = loop {
        let containers = containers_of(harness);
        if containers.len() == 1 {
            break containers[0].clone();
        }
        assert!(Instant::now() < deadline, "no warm container: {containers:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut a = Conn::open(&server.authority, &server.token, Duration::from_secs(120)).expect("connect");
    let session = a.open_session("a").expect("session");
    let reply = a
        .call(&session, 1, "bash", json!({"command": "hostname", "description": "d", "timeoutMs": 60000}))
        .expect("tools/call");
    // A container's host name is its short id: the first call ran in the warm one.
    assert_eq!(reply_text(&reply, 1).trim(), warm, "the first call ran in the warm container");
    // The pool is refilled: the session's container and a new warm one.
    while containers_of(harness).len() != 2 {
        assert!(Instant::now() < deadline, "the pool was not refilled");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(server);
    assert!(containers_of(harness).is_empty(), "the harness's end removes the warm ones too");
}
