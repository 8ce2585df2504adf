//! Process-group liveness and signalling.
//!
//! A group is alive while `kill(-pgid, 0)` succeeds (or fails with `EPERM`) and gone on
//! `ESRCH`. Once the leader has been reaped, a group whose remaining members are all zombies
//! counts as gone on Linux (their parent may never reap them, e.g. when the harness runs as
//! PID 1 of a container), found by scanning `/proc`.

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Sends `signal` to the whole group, falling back to the leader alone if the group signal
/// fails for any reason but "no such group". Errors are swallowed (races are expected).
pub(crate) fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(_) => {
            let _ = kill(Pid::from_raw(pgid), signal);
        }
    }
}

/// Whether any live (non-zombie, once the leader is reaped) process remains in the group.
pub(crate) fn group_alive(pgid: i32, leader_reaped: bool) -> bool {
    match killpg(Pid::from_raw(pgid), None) {
        Err(Errno::ESRCH) => false,
        Ok(()) if leader_reaped => has_live_member(pgid),
        _ => true,
    }
}

/// Whether process group `pgid` still has a live member, counting zombies as gone (for
/// callers that know the group's leader has been reaped, e.g. a test checking for leftovers).
pub fn group_has_live_member(pgid: u32) -> bool {
    i32::try_from(pgid).is_ok_and(|pgid| group_alive(pgid, true))
}

#[cfg(target_os = "linux")]
fn has_live_member(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return true };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some((state, group)) = parse_stat(&stat)
            && group == pgid
            && state != 'Z'
            && state != 'X'
        {
            return true;
        }
    }
    false
}

#[cfg(not(target_os = "linux"))]
fn has_live_member(_pgid: i32) -> bool {
    true
}

/// `(state, pgrp)` from a `/proc/<pid>/stat` line; the command name may contain spaces and
/// parentheses, so parsing starts after the last `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        assert_eq!(parse_stat("42 (a) b) (c) Z 1 4242 4242 0"), Some(('Z', 4242)));
        assert_eq!(parse_stat("7 (sleep) S 1 7 7 0"), Some(('S', 7)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_missing_group_is_gone() {
        // Pid 0x3FFFFFFF is above any pid_max, so no such group can exist.
        assert!(!group_alive(0x3FFF_FFFF, false));
    }
}
