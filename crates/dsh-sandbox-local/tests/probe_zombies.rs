//! A probe that kills bubblewrap leaves no zombie of bubblewrap's child in a harness that is a
//! child subreaper (as every harness with a subprocess service is). Its own binary: it makes
//! the test process a subreaper.

use std::process::{Command, Stdio};
use std::time::Duration;

/// `/proc/<pid>/stat`'s state letter, `None` once the process is gone (reaped).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

#[test]
fn a_probe_that_kills_bwrap_leaves_no_zombie() {
    if Command::new("bwrap").arg("--version").output().is_err() {
        assert!(
            !std::env::var("DSH_SANDBOX_REQUIRE_RUNNERS").is_ok_and(|r| r.contains("bwrap")),
            "bwrap is required but missing"
        );
        eprintln!("skipped: bwrap is not installed");
        return;
    }
    // SAFETY: PR_SET_CHILD_SUBREAPER only changes who adopts our orphaned descendants.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("pid");
    // bubblewrap's child records its pid and hangs; the probe times out and kills bubblewrap,
    // whose child then dies too (`--die-with-parent`) and is adopted by this process.
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let bwrap = || {
        let mut command = Command::new("bwrap");
        command
            .args(["--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--die-with-parent", "--"])
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };
    let started = std::time::Instant::now();
    // The child must be up before the bound passes (a slow host gets a longer bound).
    let mut outcome = None;
    for bound in [500, 2000, 8000] {
        let _ = std::fs::remove_file(&pid_file);
        let result = dsh_sandbox_local::run_bounded(bwrap(), Duration::from_millis(bound));
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = text.trim().parse::<i32>()
        {
            outcome = Some((result, pid));
            break;
        }
    }
    let (result, pid) = outcome.expect("bubblewrap's child started");
    assert!(result.is_err_and(|e| e.starts_with("timed out after")), "the probe killed bwrap");
    assert_eq!(state(pid), None, "bubblewrap's child was reaped, not left a zombie ({:?})", state(pid));
    assert!(started.elapsed() < Duration::from_secs(30));
}
