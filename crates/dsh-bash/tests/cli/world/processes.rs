//! The command sees and signals no process of the host, and nothing it started outlives a
//! `dsh-bash` killed with SIGKILL.

use std::process::Stdio;
use std::time::Duration;

use super::cell::{Mode, User, World};
use super::host::{self, Outsider, argv_of, pids_with, q, wait_until};
use super::matrix::{Skip, over_matrix};

/// How many processes the command's `/proc` may list: its own shell and pipeline, an init.
const HANDFUL: usize = 10;

fn attack_host_processes(world: &World) -> Result<(), Skip> {
    let marker = format!("300.{}", host::unique_number());
    let mut outsider =
        Outsider(world.host_command("sleep").arg(&marker).stdin(Stdio::null()).spawn().expect("spawn sleep"));
    let pid = outsider.pid();
    let host_init = argv_of(1).join(" ");
    let script = format!(
        "echo \"pids: $(ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' ')\"
[ -e /proc/{pid} ] && echo 'outside pid: visible' || echo 'outside pid: absent'
kill -9 {pid} 2>/dev/null && echo 'kill: delivered' || echo 'kill: refused'
echo \"init: $(tr '\\0' ' ' < /proc/1/cmdline 2>/dev/null)\"
grep -qs {harness} /proc/[0-9]*/environ && echo 'harness environ: readable' || echo 'harness environ: hidden'",
        harness = q(&world.harness_marker),
    );
    let out = world.bash(&script);
    let report = out.ok();
    let line =
        |key: &str| report.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_default().trim().to_owned();
    let mut problems = Vec::new();
    let pids: Vec<String> = line("pids: ").split_whitespace().map(str::to_owned).collect();
    if pids.len() > HANDFUL || pids.contains(&pid.to_string()) {
        problems.push(format!("/proc lists {} processes (the outside sleep is {pid})", pids.len()));
    }
    for (key, want) in [("outside pid: ", "absent"), ("kill: ", "refused"), ("harness environ: ", "hidden")] {
        if line(key) != want {
            problems.push(format!("{key}{} (want {want})", line(key)));
        }
    }
    if line("init: ") == host_init.trim() {
        problems.push(format!("/proc/1 is the host's init ({host_init})"));
    }
    if !outsider.alive() {
        problems.push(format!("the outside sleep {pid} was killed"));
    }
    assert!(problems.is_empty(), "{}\n{out:#?}", problems.join("; "));
    Ok(())
}

#[test]
fn world_sees_and_signals_no_host_process() {
    over_matrix("world_sees_and_signals_no_host_process", attack_host_processes);
}

fn attack_sigkill_harness(world: &World) -> Result<(), Skip> {
    let marker = host::unique_number();
    let (plain, detached) = (format!("300.{marker}"), format!("301.{marker}"));
    let command = format!("sleep {plain} & setsid sleep {detached} & wait");
    let mut child = world
        .dsh(&world.call_args(Mode::WorkspaceWrite, None, &command))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn dsh-bash");
    let started = wait_until(Duration::from_secs(10), || {
        let running: Vec<Vec<String>> = pids_with(&marker).into_iter().map(argv_of).collect();
        [&plain, &detached].iter().all(|arg| running.iter().any(|argv| argv == &["sleep", arg.as_str()]))
    });
    // runuser forks dsh-bash and waits for it: the harness is its only child.
    let harness = match world.cell.user {
        User::Root => Some(child.id()),
        User::Nobody => {
            let mut found = None;
            wait_until(Duration::from_secs(10), || {
                found = host::children_of(child.id()).first().copied();
                found.is_some()
            });
            found
        }
    };
    if let Some(pid) = harness {
        host::sigkill(pid);
    }
    let _ = child.kill();
    let _ = child.wait();
    let gone = wait_until(Duration::from_secs(10), || pids_with(&marker).is_empty());
    let survivors: Vec<String> =
        pids_with(&marker).iter().map(|p| format!("{p}: {:?}", argv_of(*p))).collect();
    for pid in pids_with(&marker) {
        host::sigkill(pid);
    }
    assert!(started, "test setup: the confined sleeps never started (harness {harness:?})");
    assert!(harness.is_some(), "test setup: runuser's dsh-bash child was not found");
    assert!(gone, "10 s after SIGKILL of dsh-bash, confined processes still run: {survivors:?}");
    Ok(())
}

#[test]
fn world_dies_with_a_sigkilled_harness() {
    over_matrix("world_dies_with_a_sigkilled_harness", attack_sigkill_harness);
}
