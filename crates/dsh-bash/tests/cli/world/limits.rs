//! A fork bomb or a memory hog in one call cannot take the host down, with no configuration
//! (processes) or a configured memory limit: the call ends with the fact, and the next call
//! of the same `batch` works. Confined (both runners) and unconfined, as root (control
//! groups) and as `nobody` (resource limits).
//!
//! Every run is held inside an outer control group this test makes (a `pids` and a `memory`
//! bound well above the harness's own) and a watchdog, so even a harness whose limits failed
//! could not hurt the machine; the group is emptied and removed afterwards.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cell::{Mode, User, World};
use super::host;
use super::matrix::{Skip, over_matrix_alone};

/// Processes the outer group allows: above the harness's default per-call limit (4096) plus
/// what the `nobody` user already runs, far below the host's `pid_max`.
const OUTER_PIDS: u64 = 12_000;
/// Memory the outer group allows.
const OUTER_MEMORY: u64 = 6 << 30;
/// How long a run may take before the watchdog kills it (the run fails then).
const WATCHDOG: Duration = Duration::from_secs(300);

/// The outer bound: a `pids` (and, where there is one, `memory`) control group of cgroup v1
/// made by this test, removed (its members killed) when dropped.
struct OuterGroup {
    dirs: Vec<PathBuf>,
}

impl OuterGroup {
    /// The group, its directories and `cgroup.procs` handed to `delegate` (uid, gid) when
    /// given, as a system that delegates a subtree does: then that user may make groups in it.
    fn make(delegate: Option<(u32, u32)>) -> Result<OuterGroup, Skip> {
        if !host::is_root() {
            return Err(Skip("the outer bound needs root to make a control group".into()));
        }
        let name = host::unique("dsh-limits-test");
        let mut dirs = Vec::new();
        for (hierarchy, file, value) in
            [("pids", "pids.max", OUTER_PIDS), ("memory", "memory.limit_in_bytes", OUTER_MEMORY)]
        {
            let parent = PathBuf::from("/sys/fs/cgroup").join(hierarchy);
            if !parent.join("cgroup.procs").exists() {
                continue;
            }
            let dir = parent.join(&name);
            std::fs::create_dir(&dir).map_err(|e| Skip(format!("cannot make {}: {e}", dir.display())))?;
            dirs.push(dir.clone());
            std::fs::write(dir.join(file), value.to_string())
                .map_err(|e| Skip(format!("cannot bound {}: {e}", dir.display())))?;
            if let Some((uid, gid)) = delegate {
                for path in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                        .map_err(|e| Skip(format!("cannot delegate {}: {e}", path.display())))?;
                }
            }
        }
        let group = OuterGroup { dirs };
        if !group.dirs.iter().any(|d| d.join("pids.max").exists()) {
            return Err(Skip("no cgroup v1 pids hierarchy to hold the test inside".into()));
        }
        Ok(group)
    }

    /// `command` joins the group (all its hierarchies) before it execs.
    fn hold(&self, command: &mut Command) {
        let files: Vec<std::fs::File> = self
            .dirs
            .iter()
            .map(|d| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("cgroup.procs"))
                    .expect("open cgroup.procs")
            })
            .collect();
        let fds: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
        // SAFETY: the hook only calls write(2) on descriptors opened above (kept alive by the
        // closure), which is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                let _keep = &files;
                for fd in &fds {
                    if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}

impl Drop for OuterGroup {
    fn drop(&mut self) {
        for dir in self.dirs.iter().rev() {
            for _ in 0..500 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                let members = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in members.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    // SAFETY: kill(2) of a member of the group this test made.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// `dsh-bash batch` unconfined (the local executor) as the cell's user, configured by
/// `toml` alone (the world's configuration names the sandbox's plugin, which an unconfined
/// composition does not load).
fn unconfined_batch(world: &World, toml: &str) -> Command {
    let config = world.outside.join("unconfined.toml");
    std::fs::write(&config, toml).expect("write config");
    world.give(&config);
    let binary = host::binary_for(world.cell.user);
    let mut command = match world.cell.user {
        User::Root => Command::new(binary),
        User::Nobody => {
            let mut c = Command::new(host::runuser().expect("runuser"));
            c.args(["-u", "nobody", "--"]).arg(binary);
            c
        }
    };
    command
        .arg("--config")
        .arg(&config)
        .arg("--workspace-root")
        .arg(&world.ws)
        .arg("batch")
        .env("DSH_HOME", world.dsh_home())
        .env("PATH", world.path_env())
        .current_dir(&world.ws)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `requests` as one `batch` (confined under workspace-write when `confined`, else with
/// `toml` as the whole configuration), held in an outer group and a watchdog; returns the
/// response lines.
fn held_batch(world: &World, confined: bool, toml: &str, requests: &[Value]) -> Result<Vec<Value>, Skip> {
    held_batch_delegated(world, confined, toml, requests, false)
}

/// [`held_batch`], the outer group delegated to the cell's user when `delegated`.
fn held_batch_delegated(
    world: &World,
    confined: bool,
    toml: &str,
    requests: &[Value],
    delegated: bool,
) -> Result<Vec<Value>, Skip> {
    let outer = OuterGroup::make(delegated.then(|| world.cell.user.ids()))?;
    let mut input = String::new();
    for (id, request) in requests.iter().enumerate() {
        let mut line = request.clone();
        line["id"] = json!(id);
        input.push_str(&format!("{line}\n"));
    }
    let mut command = if confined {
        world.dsh(&["--sandbox".into(), Mode::WorkspaceWrite.name().into(), "batch".into()])
    } else {
        unconfined_batch(world, toml)
    };
    outer.hold(&mut command);
    let mut child = command.stdin(Stdio::piped()).spawn().expect("spawn dsh-bash batch");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write batch");
    let started = Instant::now();
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    loop {
        if child.try_wait().expect("wait for dsh-bash").is_some() {
            break;
        }
        if started.elapsed() > WATCHDOG {
            let _ = child.kill();
            drop(outer);
            panic!("dsh-bash batch did not finish within {WATCHDOG:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stdout = reader.join().expect("reader");
    let stderr = child.stderr.take().map(|e| std::io::read_to_string(e).unwrap_or_default());
    drop(outer);
    let answers: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(answers.len(), requests.len(), "batch answered {stdout:?}, stderr {stderr:?}");
    Ok(answers)
}

fn request(world: &World, command: &str, timeout_ms: u64) -> Value {
    json!({
        "tool": "bash",
        "args": {"command": command, "description": "d", "timeoutMs": timeout_ms},
        "session": "limits",
        "cwd": world.ws,
    })
}

/// The bomb keeps its leader forking until a fork fails (the limit), so the call ends by
/// itself; the timeout only bounds a harness whose limit never holds.
const FORK_BOMB: &str = ":(){ :|:& };:; while sleep 0.2; do :; done";

fn text(answer: &Value) -> &str {
    answer["content"][0]["text"].as_str().unwrap_or_default()
}

/// The configuration that makes every foreground result carry its `usage`.
const REPORT_USAGE: &str = "[bash-local]\nreportUsage = true";

/// The bomb ended with the fact, and the next call works. With `delegated`, the harness's
/// group is the user's own (as a system that delegates one gives it), so even `nobody` bounds
/// each call with a group of its own.
fn check_fork_bomb(world: &World, confined: bool, delegated: bool) -> Result<(), Skip> {
    // Every measurement, not only the limit reached (which a result carries either way).
    if confined {
        world.configure(REPORT_USAGE);
    }
    let answers = held_batch_delegated(
        world,
        confined,
        REPORT_USAGE,
        &[request(world, FORK_BOMB, 120_000), request(world, "echo next call works", 60_000)],
        delegated,
    )?;
    let (bomb, next) = (&answers[0], &answers[1]);
    let usage = &bomb["structured"]["usage"];
    match (world.cell.user, delegated) {
        // Control groups: the whole tree is bounded and the fact is known.
        (User::Root, _) | (User::Nobody, true) => {
            assert_eq!(usage["limits"], json!("cgroup-v1"), "{bomb:#}");
            assert_eq!(usage["processLimitReached"], json!(4096), "{bomb:#}");
            assert!(usage["peakProcesses"].as_u64().is_some_and(|n| n <= 4096), "{bomb:#}");
            assert!(
                text(bomb).contains("[process limit reached: 4096 processes; further forks failed]"),
                "{bomb:#}"
            );
        }
        // Resource limits: the user's processes are bounded; forks failed.
        (User::Nobody, false) => {
            assert_eq!(usage["limits"], json!("rlimit"), "{bomb:#}");
            assert!(text(bomb).contains("Resource temporarily unavailable"), "{bomb:#}");
        }
    }
    assert_eq!(next["structured"]["exitCode"], json!(0), "{next:#}");
    assert_eq!(next["structured"]["stdout"]["text"], json!("next call works\n"), "{next:#}");
    assert!(next["structured"]["usage"]["cpuTimeMs"].is_u64(), "{next:#}");
    Ok(())
}

#[test]
fn limits_a_confined_fork_bomb_ends_with_the_fact_and_the_next_call_works() {
    over_matrix_alone("limits_a_confined_fork_bomb_ends_with_the_fact_and_the_next_call_works", |world| {
        check_fork_bomb(world, true, false)
    });
}

#[test]
fn limits_a_fork_bomb_of_an_unprivileged_user_with_a_delegated_group_ends_with_the_fact() {
    over_matrix_alone(
        "limits_a_fork_bomb_of_an_unprivileged_user_with_a_delegated_group_ends_with_the_fact",
        |world| {
            // The subject is the unprivileged user: root makes groups anywhere (the tests above).
            if world.cell.user != User::Nobody {
                return Ok(());
            }
            check_fork_bomb(world, true, true)?;
            if world.cell.runner.name() == "landlock" {
                check_fork_bomb(world, false, true)?;
            }
            Ok(())
        },
    );
}

#[test]
fn limits_an_unconfined_fork_bomb_ends_with_the_fact_and_the_next_call_works() {
    // The runner is irrelevant unconfined: the matrix's users are what matters.
    over_matrix_alone("limits_an_unconfined_fork_bomb_ends_with_the_fact_and_the_next_call_works", |world| {
        if world.cell.runner.name() != "landlock" {
            return Ok(());
        }
        check_fork_bomb(world, false, false)
    });
}

/// Allocates 16 MiB at a time, touching every page, until something stops it.
const MEMORY_HOG: &str = "python3 -c 'a = []\nwhile True: a.append(bytearray(16 << 20))'";

#[test]
fn limits_a_memory_hog_ends_at_the_configured_limit_and_the_next_call_works() {
    over_matrix_alone("limits_a_memory_hog_ends_at_the_configured_limit_and_the_next_call_works", |world| {
        world.require("python3")?;
        let memory = "[bash-local]\nmemory = \"256m\"";
        world.configure(memory);
        for confined in [true, false] {
            if !confined && world.cell.runner.name() != "landlock" {
                continue;
            }
            let answers = held_batch(
                world,
                confined,
                memory,
                &[request(world, MEMORY_HOG, 120_000), request(world, "echo next call works", 60_000)],
            )?;
            let (hog, next) = (&answers[0], &answers[1]);
            assert_eq!(hog["structured"]["timedOut"], json!(false), "{hog:#}");
            assert_ne!(hog["structured"]["exitCode"], json!(0), "{hog:#}");
            match world.cell.user {
                User::Root => {
                    assert_eq!(hog["structured"]["outOfMemory"], json!(true), "{hog:#}");
                    assert_eq!(hog["structured"]["usage"]["memoryLimitReached"], json!(256 << 20), "{hog:#}");
                    assert!(text(hog).contains("[killed: out of memory]"), "{hog:#}");
                }
                // Without a group, each process's data segment is bounded: Python says so.
                User::Nobody => assert!(text(hog).contains("MemoryError"), "{hog:#}"),
            }
            assert_eq!(next["structured"]["stdout"]["text"], json!("next call works\n"), "{next:#}");
        }
        Ok(())
    });
}

/// Tries to raise its own process limit and to leave its group for the hierarchy's root.
const RAISE_AND_ESCAPE: &str = "g=$(grep ':pids:' /proc/self/cgroup | cut -d: -f3)
echo max > /sys/fs/cgroup/pids$g/pids.max 2>/dev/null && echo 'raise: done' || echo 'raise: refused'
echo $$ > /sys/fs/cgroup/pids/cgroup.procs 2>/dev/null && echo 'escape: done' || echo 'escape: refused'
echo \"limit: $(cat /sys/fs/cgroup/pids$g/pids.max)\"";

#[test]
fn limits_a_confined_command_cannot_raise_or_leave_its_group() {
    over_matrix_alone("limits_a_confined_command_cannot_raise_or_leave_its_group", |world| {
        // `nobody` has a group of its own only when one is delegated to it, and then owns the
        // group's files: the case that matters most.
        let delegated = world.cell.user == User::Nobody;
        world.configure(REPORT_USAGE);
        let answers =
            held_batch_delegated(world, true, "", &[request(world, RAISE_AND_ESCAPE, 60_000)], delegated)?;
        let out = &answers[0];
        assert_eq!(out["structured"]["usage"]["limits"], json!("cgroup-v1"), "{out:#}");
        let stdout = out["structured"]["stdout"]["text"].as_str().unwrap_or_default();
        assert_eq!(stdout, "raise: refused\nescape: refused\nlimit: 4096\n", "{out:#}");
        Ok(())
    });
}
