//! A short-lived direct child started with `std::process::Command` outside any service (a
//! probe, a version query), in a process group of its own, owned until all of it is gone.
//!
//! Such a child cannot simply share the harness's group: whatever it leaves behind when it is
//! killed (a launcher's own child, say) is adopted by the harness when it is a subreaper, and
//! the containment sweep never reaps anything in the harness's group — it cannot tell an
//! adopted orphan there from another direct child whose owner is about to wait for it. In a
//! group of its own, the child and everything it started are killed and reaped as one when
//! the [`GroupedChild`] is dropped, and until then the sweep leaves the child alone (its pid
//! is registered like a service's leader).

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How long dropping a [`GroupedChild`] waits for the killed members of its group to go.
const GROUP_BOUND: Duration = Duration::from_secs(2);

/// A child in a process group of its own (its pgid is its pid). Use [`GroupedChild::child`]
/// to wait for it, read its pipes, or kill it; dropping the value kills what is left of the
/// group with `SIGKILL`, reaps the child if it was not waited for, and reaps every member of
/// the group the harness adopted. Dropping blocks (at most a couple of seconds, when members
/// are slow to die): drop it on a thread that may block.
#[derive(Debug)]
pub struct GroupedChild {
    child: Child,
    pgid: i32,
}

impl GroupedChild {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> std::io::Result<Self> {
        std::os::unix::process::CommandExt::process_group(command, 0);
        // The spawn lock is held until the pid is registered, so no sweep takes the fresh
        // child for a stray (it is in no live tree's group and not in the harness's).
        let mut spawned = crate::containment::spawn_lock();
        let child = command.spawn()?;
        let pgid = i32::try_from(child.id()).map_err(|_| std::io::Error::from_raw_os_error(libc::ERANGE))?;
        spawned.insert(pgid);
        drop(spawned);
        Ok(Self { child, pgid })
    }

    /// The child.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The process group id (the child's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }
}

impl Drop for GroupedChild {
    fn drop(&mut self) {
        // The group id cannot be reused while any member (or the unreaped leader) holds it.
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        reap_group(self.pgid, GROUP_BOUND);
        crate::containment::forget_spawned(self.pgid);
    }
}

/// Kills and reaps the members of `pgid` this process adopted, until none is left or
/// `bound` passed. Members adopted by another process are only waited for.
fn reap_group(pgid: i32, bound: Duration) {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + bound;
    let mut pause = Duration::from_millis(1);
    while !matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH)) {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        for (pid, ppid) in crate::containment::group_members_with_parent(pgid) {
            if ppid == me {
                crate::containment::reap(pid);
            }
        }
        if Instant::now() >= deadline {
            tracing::debug!(pgid, "members of a grouped child's group outlived the bound");
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
