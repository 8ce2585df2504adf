//! A grouped child (a probe's launcher, say) leaves no zombie behind when it is killed, and
//! the containment sweep leaves it alone while it runs. Its own binary: it makes the test
//! process a child subreaper.

use std::process::{Command, Stdio};
use std::time::Duration;

use dsh_subprocess::{GroupedChild, SpawnSpec, SubprocessService};

/// This process's children that are zombies, with their process groups.
fn zombie_children() -> Vec<(i32, i32)> {
    let me = std::process::id() as i32;
    let mut zombies = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(end) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[end + 1..].split_whitespace().collect();
        let (state, ppid, pgrp) = (fields[0], fields[1].parse::<i32>().ok(), fields[2].parse::<i32>().ok());
        if state == "Z" && ppid == Some(me) {
            zombies.push((pid, pgrp.unwrap_or(0)));
        }
    }
    zombies
}

fn subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER only changes who adopts our orphaned descendants.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
}

#[test]
fn a_killed_grouped_child_leaves_no_zombie_of_its_descendants() {
    subreaper();
    let mut command = Command::new("sh");
    command.args(["-c", "sleep 30 & echo $!; wait"]).stdin(Stdio::null()).stdout(Stdio::piped());
    let mut grouped = GroupedChild::spawn(&mut command).expect("spawn");
    let pgid = grouped.pgid();
    let mut line = String::new();
    let stdout = grouped.child().stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("read");
    let sleeper: i32 = line.trim().parse().expect("pid");
    // Killing the leader alone orphans the sleeper into this (subreaper) process.
    grouped.child().kill().expect("kill");
    grouped.child().wait().expect("wait");
    drop(grouped);
    assert!(
        zombie_children().iter().all(|(pid, group)| *pid != sleeper && *group != pgid),
        "a zombie of the grouped child's group stayed: {:?}",
        zombie_children()
    );
    assert!(!std::path::Path::new(&format!("/proc/{sleeper}")).exists(), "the orphan is gone");
}

#[tokio::test]
async fn the_sweep_leaves_a_running_grouped_child_alone() {
    subreaper();
    let service = SubprocessService::new();
    let mut command = Command::new("sleep");
    command.arg("30");
    let mut grouped = GroupedChild::spawn(&mut command).expect("spawn");
    // A settled tree asks for a sweep; disposal sweeps until no stray is pending.
    let handle = service.spawn(SpawnSpec::new(vec!["true".into()])).expect("spawn");
    handle.wait().await;
    assert!(handle.wait_for_exit(None).await);
    service.dispose().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(grouped.child().try_wait().expect("try_wait"), None, "the grouped child still runs");
    drop(grouped);
    assert!(zombie_children().is_empty(), "{:?}", zombie_children());
}
