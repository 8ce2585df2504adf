//! Functional probes of the real runners, each bounded by the probe timeout.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_sandbox::{ChildConfinement, SandboxEnforcement};
use dsh_subprocess::GroupedChild;

use crate::inprocess::{InProcessConfinement, landlock_abi};
use crate::runner::{ProbeOutcome, RunnerCapability, RunnerKind, RunnerProber};

/// Why bubblewrap is reported `partial` whatever its probe says.
const BWRAP_EXDEV_NOTE: &str = "a hard link from outside the writable roots into them fails with EXDEV (\"Invalid cross-device link\"), which bubblewrap's denial signature does not report";
const WORLD_NOTE: &str = "each command gets a new session, the session's PID namespace and /proc, a private /dev, the session's private /tmp and /dev/shm, /run hidden, no capabilities and a seccomp filter";
const UNIX_SOCKET_NOTE: &str = "Unix sockets bound at paths outside /tmp, /run and the writable roots stay reachable: the kernel has no control on connecting to them by path";
const MOUNT_NS_NOTE: &str = "without the mount namespace, Landlock does not govern metadata changes (chmod, chown, utimes, xattrs) outside the writable roots";

/// Probes the host for real: runs `true` under each runner.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemProber;

impl RunnerProber for SystemProber {
    fn probe(&self, runner: RunnerKind, timeout: Duration) -> ProbeOutcome {
        match runner {
            RunnerKind::Landlock => probe_landlock(timeout),
            RunnerKind::Bwrap => probe_bwrap(timeout),
        }
    }

    fn unprobed(&self, runner: RunnerKind) -> RunnerCapability {
        match runner {
            RunnerKind::Landlock => RunnerCapability::full(),
            RunnerKind::Bwrap => bwrap_capability(),
        }
    }

    fn version(&self, runner: RunnerKind, timeout: Duration) -> Option<String> {
        match runner {
            RunnerKind::Landlock => Some(match landlock_abi() {
                Ok(abi) => format!("Landlock ABI {abi}"),
                Err(reason) => reason,
            }),
            RunnerKind::Bwrap => {
                let mut command = Command::new("bwrap");
                command.arg("--version").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
                let output = run_bounded_output(command, timeout)?;
                let text = String::from_utf8_lossy(&output).trim().to_owned();
                (!text.is_empty()).then_some(text)
            }
        }
    }
}

impl SystemProber {
    /// The Landlock probe with a generous bound, for in-crate tests.
    #[cfg(test)]
    pub(crate) fn probe_for_tests(&self) -> ProbeOutcome {
        probe_landlock(Duration::from_secs(10))
    }
}

fn bwrap_capability() -> RunnerCapability {
    // As root the command runs with `--cap-drop ALL`, so it cannot remount the read-only root.
    let notes = vec![BWRAP_EXDEV_NOTE.to_owned()];
    RunnerCapability { enforcement: SandboxEnforcement::Partial, mount_namespace: false, notes }
}

fn probe_bwrap(timeout: Duration) -> ProbeOutcome {
    let mut command = Command::new("bwrap");
    command
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--die-with-parent", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match run_bounded(command, timeout) {
        Ok(status) if status.success() => ProbeOutcome::Usable(bwrap_capability()),
        Ok(status) => ProbeOutcome::Unusable(format!("bwrap probe failed: {status}")),
        Err(reason) => ProbeOutcome::Unusable(format!("bwrap probe failed: {reason}")),
    }
}

fn probe_landlock(timeout: Duration) -> ProbeOutcome {
    let abi = match landlock_abi() {
        Ok(abi) => abi,
        Err(reason) => return ProbeOutcome::Unusable(reason),
    };
    let abi_note = |notes: &mut Vec<String>| {
        if abi < 2 {
            notes.push(format!(
                "Landlock ABI {abi} refuses every link or rename across directories, even inside the writable roots"
            ));
        }
    };
    let with_mounts = try_in_process(true, timeout);
    if with_mounts.is_ok() {
        let mut capability = RunnerCapability::full();
        abi_note(&mut capability.notes);
        capability.notes.push(WORLD_NOTE.to_owned());
        capability.notes.push(if abi >= 6 {
            format!("signals and abstract Unix sockets are scoped to the sandbox (Landlock ABI {abi})")
        } else {
            format!(
                "Landlock ABI {abi} has no scoping: abstract Unix sockets outside the sandbox stay reachable"
            )
        });
        capability.notes.push(UNIX_SOCKET_NOTE.to_owned());
        return ProbeOutcome::Usable(capability);
    }
    match try_in_process(false, timeout) {
        Ok(()) => {
            let mount_error = with_mounts.err().unwrap_or_default();
            let mut notes =
                vec![format!("mount namespace unavailable ({mount_error})"), MOUNT_NS_NOTE.to_owned()];
            abi_note(&mut notes);
            ProbeOutcome::Usable(RunnerCapability {
                enforcement: SandboxEnforcement::Partial,
                mount_namespace: false,
                notes,
            })
        }
        Err(reason) => ProbeOutcome::Unusable(reason),
    }
}

/// Runs `true` confined read-only in process.
fn try_in_process(mount_namespace: bool, timeout: Duration) -> Result<(), String> {
    let confinement = Arc::new(InProcessConfinement::prepare(&[], mount_namespace)?);
    let hook = Arc::clone(&confinement);
    let mut command = Command::new("true");
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: `InProcessConfinement` implements the `unsafe` trait `ChildConfinement`, whose
    // `apply_in_child` is async-signal-safe; the closure only calls it.
    unsafe {
        command.pre_exec(move || hook.apply_in_child());
    }
    match run_bounded(command, timeout) {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("confined `true` failed: {status}")),
        Err(reason) => Err(confinement.failure().unwrap_or(reason)),
    }
}

/// Spawns and waits at most `timeout`; a child still running then is killed.
///
/// The child runs in a process group of its own ([`GroupedChild`]): a runner killed here
/// (bubblewrap) leaves its own child behind, which a harness that is a child subreaper adopts;
/// dropping the grouped child kills and reaps the whole group, so no zombie stays (the
/// containment sweep never reaps in the harness's own group). Blocks: call it from a thread
/// that may block.
#[doc(hidden)]
pub fn run_bounded(mut command: Command, timeout: Duration) -> Result<ExitStatus, String> {
    let mut grouped = GroupedChild::spawn(&mut command).map_err(|e| e.to_string())?;
    // Dropping `grouped` kills and reaps what is still running.
    match wait_timeout(grouped.child(), timeout) {
        Ok(Some(status)) => Ok(status),
        Ok(None) => Err(format!("timed out after {}ms", timeout.as_millis())),
        Err(e) => Err(e.to_string()),
    }
}

fn run_bounded_output(mut command: Command, timeout: Duration) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut grouped = GroupedChild::spawn(&mut command).ok()?;
    let child = grouped.child();
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let succeeded = matches!(wait_timeout(child, timeout), Ok(Some(status)) if status.success());
    // Killing what is left of the group ends every writer of the reader's pipe.
    drop(grouped);
    if succeeded { reader.join().ok() } else { None }
}

/// Waits for `child` up to `timeout` (a pidfd polled once; a short back-off loop where
/// pidfds are unavailable). `Ok(None)` when it is still running.
pub(crate) fn wait_timeout(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    let pid = libc::pid_t::try_from(child.id()).map_err(|_| std::io::Error::other("pid out of range"))?;
    // SAFETY: pidfd_open on a child we have not reaped yet.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd >= 0 {
        let fd = libc::c_int::try_from(fd).map_err(|_| std::io::Error::other("fd out of range"))?;
        // SAFETY: `fd` was just returned by pidfd_open and is owned here.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
            let mut pfd =
                libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&fd), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
            if ready > 0 {
                return child.wait().map(Some);
            }
            if ready == 0 {
                return child.try_wait();
            }
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_timeout_returns_the_status_or_none_when_still_running() {
        let mut quick = Command::new("true").spawn().unwrap();
        assert!(wait_timeout(&mut quick, Duration::from_secs(30)).unwrap().unwrap().success());
        let mut slow = Command::new("sleep").arg("30").spawn().unwrap();
        assert_eq!(wait_timeout(&mut slow, Duration::from_millis(20)).unwrap(), None);
        slow.kill().unwrap();
        slow.wait().unwrap();
    }

    #[test]
    fn probes_bound_a_hanging_runner() {
        let mut command = Command::new("sleep");
        command.arg("30");
        let started = Instant::now();
        assert_eq!(run_bounded(command, Duration::from_millis(50)), Err("timed out after 50ms".into()));
        assert!(started.elapsed() < Duration::from_secs(20));
    }
}
