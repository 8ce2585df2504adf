//! Faults are clear results, never lost calls: the jobs of a killed harness are reported
//! `lost` to their owning session by the next harness with the same `DSH_HOME` (and a
//! journaled pid that is no longer the same process is left alone); a spill directory that
//! fills up or disappears still gives the call its retained tail with a note; an unwritable
//! `DSH_HOME` costs one warning and no call.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Sandbox, output};
use crate::killed_harness::{alive_with, marker, wait_for};

/// A `dsh-bash batch` driven one line at a time, that the test can SIGKILL.
struct LiveBatch {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl LiveBatch {
    fn start(sandbox: &Sandbox) -> Self {
        let mut child = sandbox
            .command(&["batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dsh-bash batch");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdin, stdout }
    }

    fn call(&mut self, request: &Value) -> Value {
        writeln!(self.stdin, "{request}").expect("write request");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read response");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    fn sigkill(mut self) {
        // SAFETY: kill with a pid this test spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn text(response: &Value) -> String {
    response["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|b| b["text"].as_str().expect("text"))
        .collect()
}

fn request(tool: &str, args: Value, session: &str, cwd: &Path, id: u32) -> Value {
    json!({"tool": tool, "args": args, "session": session, "cwd": cwd, "id": id})
}

/// The journal directory of a harness home.
fn journals(home: &Path) -> Vec<PathBuf> {
    let dir = home.join("sessions/jobs");
    let mut found: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    found.sort();
    found
}

/// A process's start time (`/proc/<pid>/stat` field 22).
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &stat[stat.rfind(')').expect(")") + 2..];
    rest.split_whitespace().nth(19).expect("field 22").parse().expect("number")
}

const LOST: &str = "the harness that ran it ended";

#[test]
fn a_killed_batchs_running_job_is_reported_lost_to_its_owner_only() {
    let sandbox = Sandbox::outside_tmp();
    let cwd = std::fs::canonicalize(sandbox.path()).expect("canonical");
    let sleeper = marker();
    // More output than memory keeps (64000 bytes): a spill file holds all of it.
    let command = format!("seq 1 30000; sleep {sleeper}");
    let mut batch = LiveBatch::start(&sandbox);
    let args = json!({"command": command, "description": "d", "run_in_background": true});
    let started = batch.call(&request("bash", args, "owner", &cwd, 1));
    assert_eq!(started["structured"], json!({"kind": "background", "jobId": "bash-1"}), "{started}");
    wait_for(&sleeper, 1);
    // The harness journals the spill file once it took in more output than memory keeps.
    let home = sandbox.path().join("home");
    // Then it is killed once it took in all of it (what is still in the pipe when it dies
    // is lost with it).
    let journaled_spill = || {
        journals(&home).iter().find_map(|j| {
            std::fs::read_to_string(j).unwrap_or_default().lines().find_map(|line| {
                let entry: Value = serde_json::from_str(line).ok()?;
                (entry["type"] == "spill").then(|| entry["path"].as_str().map(str::to_owned)).flatten()
            })
        })
    };
    let spilled = Instant::now() + Duration::from_secs(20);
    while !journaled_spill()
        .is_some_and(|path| std::fs::read_to_string(path).unwrap_or_default().ends_with("30000\n"))
    {
        assert!(Instant::now() < spilled, "the spill file was never journaled, or never complete");
        std::thread::sleep(Duration::from_millis(20));
    }
    batch.sigkill();
    let gone = Instant::now() + Duration::from_secs(5);
    while !alive_with(&sleeper).is_empty() && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(journals(&home).len(), 1, "the dead harness's journal stays behind");

    let mut next = LiveBatch::start(&sandbox);
    // Another session: neither listed nor named.
    let other_list = next.call(&request("job_list", json!({}), "other", &cwd, 1));
    assert_eq!(text(&other_list), "(no background jobs)");
    let other_read = next.call(&request("job_output", json!({"job_id": "bash-1"}), "other", &cwd, 2));
    assert_eq!(text(&other_read), "Error: unknown job bash-1", "{other_read}");
    assert_eq!(other_read["isError"], json!(true));

    let listed = next.call(&request("job_list", json!({}), "owner", &cwd, 3));
    let listed_text = text(&listed);
    let prefix = format!("bash-1 [bash] lost \u{2014} {command}\n  [status: lost, {LOST}; full output: ");
    let spill = listed_text
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or_else(|| panic!("unexpected job_list text: {listed_text:?}"));
    let spilled = std::fs::read_to_string(spill).expect("the spill file is still there");
    assert!(spilled.starts_with("1\n2\n3\n") && spilled.ends_with("30000\n"), "complete stream");
    assert_eq!(listed["structured"][0]["status"], json!("lost"));
    let read = next.call(&request("job_output", json!({"job_id": "bash-1"}), "owner", &cwd, 4));
    assert_eq!(text(&read), format!("(no new output)\n[status: lost, {LOST}; full output: {spill}]"));

    // A job started now gets a fresh id.
    let args = json!({"command": "true", "description": "d", "run_in_background": true});
    let fresh = next.call(&request("bash", args, "owner", &cwd, 5));
    assert_eq!(fresh["structured"]["jobId"], json!("bash-2"), "{fresh}");
    drop(next.stdin);
    assert_eq!(next.child.wait().expect("wait").code(), Some(0));
    assert_eq!(journals(&home), Vec::<PathBuf>::new(), "reported and ended: no journal is left");
}

/// A `sleep` in its own process group, for a journal entry to name.
fn own_group_sleep(marker: &str) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new("sleep").arg(marker).process_group(0).spawn().expect("sleep")
}

#[test]
fn a_journaled_pid_whose_start_time_differs_is_never_killed() {
    let sandbox = Sandbox::new();
    let cwd = std::fs::canonicalize(sandbox.path()).expect("canonical");
    let (unrelated_marker, leftover_marker) = (marker(), marker());
    let mut unrelated = own_group_sleep(&unrelated_marker);
    let mut leftover = own_group_sleep(&leftover_marker);
    let entry = |id: &str, label: &str, pid: u32, start: u64| {
        json!({"type": "start", "id": id, "kind": "bash", "label": label, "owner": "s", "at": 1,
               "pid": pid, "pgid": pid, "startTime": start})
    };
    let dir = sandbox.path().join("home/sessions/jobs");
    std::fs::create_dir_all(&dir).expect("mkdir");
    // The unrelated process has this pid, but not this start time: a recycled pid.
    let wrong = entry("bash-1", "recycled", unrelated.id(), start_time(unrelated.id()) + 1);
    let right = entry("bash-2", "leftover", leftover.id(), start_time(leftover.id()));
    std::fs::write(dir.join("1-000000001.journal"), format!("{wrong}\n{right}\n")).expect("journal");

    let list = json!({"tool": "job_list", "args": {}, "session": "s", "cwd": cwd, "id": 1});
    let out = sandbox.run(&["batch"], &format!("{list}\n"));
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    let not_kept = format!("[status: lost, {LOST}; its output was not kept]");
    assert_eq!(
        text(&lines[0]),
        format!(
            "bash-1 [bash] lost \u{2014} recycled\n  {not_kept}\nbash-2 [bash] lost \u{2014} leftover\n  {not_kept}"
        )
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = leftover.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGKILL), "the real leftover is stopped");
    assert_eq!(unrelated.try_wait().expect("wait"), None, "a process with another start time is left alone");
    assert_eq!(alive_with(&unrelated_marker), vec![unrelated.id()]);
    let _ = unrelated.kill();
    let _ = unrelated.wait();
}

/// Whether this test runs as root (mounts need it); says why it skips otherwise.
fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    println!("skipped: {what} needs root (mount); CI runs as root");
    false
}

/// `mount -t tmpfs -o OPTIONS tmpfs DIR`; false (printing why) when the host refuses.
fn mount_tmpfs(dir: &Path, options: &str) -> bool {
    let out = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(dir).output();
    match out {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            println!("skipped: mount refused here: {}", String::from_utf8_lossy(&out.stderr).trim());
            false
        }
        Err(e) => {
            println!("skipped: no mount here: {e}");
            false
        }
    }
}

fn umount(dir: &Path) {
    let _ = Command::new("umount").arg(dir).status();
}

/// Runs one foreground bash call through `batch` with `spillDir` set; returns its text.
fn call_with_spill_dir(sandbox: &Sandbox, spill_dir: &Path, command: &str) -> String {
    let config = sandbox.write("spill.toml", &format!("[subprocess]\nspillDir = {}\n", json!(spill_dir)));
    let args = json!({"command": command, "description": "d"});
    let line = json!({"tool": "bash", "args": args, "id": 1});
    let out = sandbox.run(&["--config", config.to_str().expect("utf-8"), "batch"], &format!("{line}\n"));
    assert_eq!(out.code, Some(0), "{out:?}");
    text(&out.json_lines()[0])
}

#[test]
fn a_full_spill_directory_still_returns_the_tail_with_a_note() {
    if !root_or_skip("a full spill directory") {
        return;
    }
    let sandbox = Sandbox::new();
    let spill = sandbox.path().join("spill");
    std::fs::create_dir(&spill).expect("mkdir");
    if !mount_tmpfs(&spill, "size=64k,mode=0700") {
        return;
    }
    let result = call_with_spill_dir(&sandbox, &spill, "head -c 300000 /dev/zero | tr '\\0' a; echo");
    umount(&spill);
    assert_eq!(result, format!("{}\n\n[output truncated; full output: (unavailable)]", "a".repeat(63_999)));
}

#[test]
fn a_spill_directory_removed_mid_run_still_returns_the_tail_with_a_note() {
    let sandbox = Sandbox::new();
    let spill = sandbox.path().join("spill");
    std::fs::create_dir(&spill).expect("mkdir");
    let command = format!(
        "head -c 100000 /dev/zero | tr '\\0' b; sleep 0.3; rm -rf {}; head -c 999 /dev/zero | tr '\\0' c; echo",
        crate::harness::shell_quote(spill.display())
    );
    let result = call_with_spill_dir(&sandbox, &spill, &command);
    assert_eq!(
        result,
        format!(
            "{}{}\n\n[output truncated; full output: (unavailable)]",
            "b".repeat(63_000),
            "c".repeat(999)
        )
    );
}

#[test]
fn an_unwritable_dsh_home_costs_one_warning_and_no_call() {
    let sandbox = Sandbox::new();
    let home = sandbox.path().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    // Root ignores modes: a read-only mount; anyone else: a read-only directory.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let error = if root {
        if !mount_tmpfs(&home, "ro,size=64k,mode=0755") {
            return;
        }
        "Read-only file system (os error 30)"
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        "Permission denied (os error 13)"
    };
    let cwd = std::fs::canonicalize(sandbox.path()).expect("canonical");
    let input = one_two_three(&cwd, "s");
    let out = output(sandbox.command(&["batch"]), input.as_bytes());
    if root {
        umount(&home);
    }
    assert_eq!(out.code, Some(0), "{out:?}");
    let texts: Vec<String> = out.json_lines().iter().map(text).collect();
    assert_eq!(texts[0], "one\n");
    assert_eq!(texts[1], "started background job bash-1", "{texts:?}");
    assert_eq!(texts[2], "two\n[status: completed, exit code: 0]");
    assert_eq!(texts[3], "three\n");
    assert_eq!(
        out.stderr,
        format!(
            "dsh-bash: warning: cannot write {}: {error}; session logs and the job journal are not kept\n",
            home.join("sessions").display()
        )
    );
}

/// `dsh-bash ARGS` with `stdin`, its `DSH_HOME` a full 64 KiB tmpfs mounted in a mount
/// namespace of its own (`unshare -m`), so the host's mounts never change.
fn run_in_full_home(sandbox: &Sandbox, args: &[&str], stdin: &str) -> crate::harness::Run {
    let home = sandbox.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    run_over_full_tmpfs(sandbox, &home, "0755", args, stdin)
}

/// `dsh-bash ARGS` with `stdin` (its `DSH_HOME` under the sandbox), `full` a full 64 KiB
/// tmpfs of `mode` mounted in a mount namespace of the run's own (`unshare -m`), so the
/// host's mounts never change.
fn run_over_full_tmpfs(
    sandbox: &Sandbox,
    full: &std::path::Path,
    mode: &str,
    args: &[&str],
    stdin: &str,
) -> crate::harness::Run {
    let script = "mount --make-rprivate / && mount -t tmpfs -o size=64k,mode=$FULL_MODE tmpfs \"$FULL\" || exit 97; \
                  head -c 1048576 /dev/zero > \"$FULL/fill\" 2>/dev/null; exec \"$0\" \"$@\"";
    let mut command = Command::new("unshare");
    command
        .args(["-m", "sh", "-c", script, env!("CARGO_BIN_EXE_dsh-bash")])
        .args(args)
        .env("FULL", full)
        .env("FULL_MODE", mode)
        .env("DSH_HOME", sandbox.path().join("home"))
        .env_remove("DSH_MCP_TOKEN")
        .current_dir(sandbox.path());
    let out = output(command, stdin.as_bytes());
    assert_ne!(out.code, Some(97), "the full tmpfs could not be mounted: {out:?}");
    out
}

/// A batch of one session's calls: `echo one`, a background `echo two` read to its end, then
/// `echo three` in `last_session`.
fn one_two_three(cwd: &std::path::Path, last_session: &str) -> String {
    let lines = [
        request("bash", json!({"command": "echo one", "description": "d"}), "s", cwd, 1),
        request(
            "bash",
            json!({"command": "echo two", "description": "d", "run_in_background": true}),
            "s",
            cwd,
            2,
        ),
        request("job_output", json!({"job_id": "bash-1", "wait": true}), "s", cwd, 3),
        request("bash", json!({"command": "echo three", "description": "d"}), last_session, cwd, 4),
    ];
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn a_full_dsh_home_costs_one_warning_and_no_call() {
    if !root_or_skip("a full DSH_HOME") {
        return;
    }
    let sandbox = Sandbox::new();
    let home = sandbox.path().join("home");
    let warning = format!(
        "dsh-bash: warning: cannot write {}: No space left on device (os error 28); session logs and the job \
         journal are not kept\n",
        home.join("sessions").display()
    );
    let cwd = std::fs::canonicalize(sandbox.path()).expect("canonical");
    let input = one_two_three(&cwd, "t");
    let out = run_in_full_home(&sandbox, &["batch"], &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let texts: Vec<String> = out.json_lines().iter().map(text).collect();
    assert_eq!(
        texts,
        ["one\n", "started background job bash-1", "two\n[status: completed, exit code: 0]", "three\n"]
    );
    assert_eq!(out.stderr, warning);
    let cwd = cwd.to_str().expect("utf-8");
    let args = r#"{"command":"echo four","description":"d"}"#;
    let out = run_in_full_home(&sandbox, &["call", "--session", "s1", "--cwd", cwd, "bash", args], "");
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (Some(0), "four\n", warning.as_str()),
        "{out:?}"
    );
}

#[test]
fn a_background_read_past_a_full_spill_directory_says_unavailable() {
    if !root_or_skip("a full spill directory") {
        return;
    }
    let sandbox = Sandbox::new();
    let spill = sandbox.path().join("spill");
    std::fs::create_dir(&spill).expect("mkdir");
    let config = sandbox.write("spill.toml", &format!("[subprocess]\nspillDir = {}\n", json!(spill)));
    let cwd = std::fs::canonicalize(sandbox.path()).expect("canonical");
    let command = "head -c 300000 /dev/zero | tr '\\0' a; echo";
    let lines = [
        request(
            "bash",
            json!({"command": command, "description": "d", "run_in_background": true}),
            "s",
            &cwd,
            1,
        ),
        request("job_output", json!({"job_id": "bash-1", "wait": true}), "s", &cwd, 2),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    // The spill directory a full 64 KiB tmpfs, in a mount namespace of the run's own.
    let out = run_over_full_tmpfs(
        &sandbox,
        &spill,
        "0700",
        &["--config", config.to_str().expect("utf-8"), "batch"],
        &input,
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let texts: Vec<String> = out.json_lines().iter().map(text).collect();
    assert_eq!(texts[0], "started background job bash-1", "{texts:?}");
    let end = "a\n[some output was dropped from memory; full output: (unavailable)]\n[status: completed, exit code: 0]";
    assert!(texts[1].ends_with(end), "{}", &texts[1][texts[1].len().saturating_sub(300)..]);
}
