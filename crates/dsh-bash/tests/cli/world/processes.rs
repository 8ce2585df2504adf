//! The command sees and signals no process of the host, and nothing it started outlives a
//! `dsh-bash` killed with SIGKILL.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use super::cell::{Mode, Outcome, User, World};
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

/// A descendant that leaves its call (`setsid`, its parent gone) and changes an auto-run file
/// later, while no call of the session runs, must not get its change taken for the user's:
/// it ends with the last command of its session, before it can plant. The plant here would
/// set git's `core.fsmonitor` (run by the user's next `git status`) and write an `.envrc`.
fn attack_stray_plants_later(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    let marker = world.outside.join(format!("stray-{}", host::unique_number()));
    let tag = host::unique_number();
    world.host_sh(
        "git init -q && git config user.email u@example.com && git config user.name u \
         && echo hi > a.txt && git add a.txt && git commit -qm init",
    );
    let plant = format!(
        "(setsid sh -c 'sleep 2; git config core.fsmonitor \"touch {m}\"; echo export X=1 > .envrc; \
         exec sleep 303.{tag}' </dev/null >/dev/null 2>&1 &); echo started",
        m = marker.display()
    );
    // Two calls of one session with a pause between them: the plant would come while none runs.
    let line = |id: u32, command: &str| {
        json!({"tool": "bash", "session": "s1", "cwd": world.ws, "id": id,
               "args": {"command": command, "description": "d", "timeoutMs": 60000}})
        .to_string()
            + "\n"
    };
    let mut child = world
        .dsh(&["--sandbox".into(), Mode::WorkspaceWrite.name().into(), "batch".into()])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn dsh-bash batch");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    stdin.write_all(line(1, &plant).as_bytes()).expect("write the first call");
    let mut first = String::new();
    stdout.read_line(&mut first).expect("read the first answer");
    std::thread::sleep(Duration::from_secs(4));
    let census = format!("ps -eo args | grep -c '30[3]\\.{tag}' || true");
    stdin.write_all(line(2, &census).as_bytes()).expect("write the second call");
    drop(stdin);
    let mut second = String::new();
    stdout.read_line(&mut second).expect("read the second answer");
    let _ = child.wait();
    for pid in pids_with(&format!("303.{tag}")) {
        host::sigkill(pid);
    }
    let second = Outcome::from_value(&serde_json::from_str(&second).expect("a JSON answer"));
    // The user's own git, outside, as the user would run it.
    let _ = world.host_command("git").arg("status").output().expect("spawn git status");
    let mut problems = Vec::new();
    if marker.exists() {
        problems.push("the stray's fsmonitor ran in the user's git status".to_owned());
    }
    if world.ws.join(".envrc").exists() {
        problems.push("the stray's .envrc is in the workspace".to_owned());
    }
    // The second call's count of strays is shown, not judged: the plant is what matters.
    assert!(problems.is_empty(), "{}\nfirst: {first}\nstrays seen next: {second:#?}", problems.join("; "));
    Ok(())
}

#[test]
fn world_ends_what_a_call_leaves_before_it_can_plant() {
    over_matrix("world_ends_what_a_call_leaves_before_it_can_plant", attack_stray_plants_later);
}
