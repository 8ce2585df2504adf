//! Containment: nothing a process tree starts outlives it.
//!
//! Killing a process group misses descendants that left the group: a `setsid`
//! or double-forked daemon, a process that called `setpgid`. With [`Containment::Subreaper`]
//! the harness becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`), so every orphaned
//! descendant of any call or job is re-parented to the harness instead of init, and:
//!
//! * when a tree's leader exits (it finished, was killed, timed out or was aborted), what is
//!   left of its group is killed — except members whose initial environment holds
//!   `DSH_DETACH=1`, the documented opt-out (`DSH_DETACH=1 setsid server &`);
//! * a reaper task, woken after each leader exit (and on a slow timer), lists the harness's
//!   children and kills every one the service did not spawn itself, unless it is in the
//!   harness's own group (spawns by other in-process code), in the group of a live tree (it is
//!   still inside its call), or opted out with `DSH_DETACH=1`. Killing a re-parented process
//!   re-parents its children to the harness in turn, so the sweep converges. Strays are reaped
//!   with `waitpid(pid)`, never `waitpid(-1)`, which would steal the runtime's own statuses.
//!   The kernel hands orphans to the subreaper's first live thread, the main thread, so these
//!   per-exit sweeps read that one thread's `children` file (kept open, one `pread`); the
//!   sweeps of disposal and process exit read every thread's.
//!
//! The subreaper flag is per process, so the bookkeeping (pids the services spawned, groups
//! still live) is process-wide: several services in one process never kill each other's
//! trees.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{Notify, watch};

/// The environment entry by which a process opts out of containment.
pub const DETACH_ENV: &str = "DSH_DETACH=1";

/// Which containment mechanism a service asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Containment {
    /// Make the harness a child subreaper and kill every stray descendant (Linux only).
    #[default]
    Subreaper,
    /// The reference behaviour: only process groups are signalled; `setsid` and
    /// double-forked descendants escape, and settlement leaves descendants running.
    None,
}

/// The containment a service actually has, with the reason when it is not what was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainmentStatus {
    /// The containment in effect.
    pub mechanism: Containment,
    /// Why this containment is in effect (what it does, or why the asked one failed).
    pub reason: String,
}

impl ContainmentStatus {
    /// Whether strays are being contained.
    pub fn is_active(&self) -> bool {
        self.mechanism == Containment::Subreaper
    }
}

impl fmt::Display for ContainmentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.mechanism {
            Containment::Subreaper => "subreaper",
            Containment::None => "none",
        };
        write!(f, "{name} ({})", self.reason)
    }
}

/// Pids the services spawned whose leader has not been reaped yet. The same lock is held
/// across `spawn` and the insertion, so a sweep never mistakes a fresh child for a stray.
static SPAWNED: LazyLock<Mutex<HashSet<i32>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Whether some service made this process a subreaper (then the exit hook sweeps too).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Held across a spawn and the registration of its pid.
pub(crate) fn spawn_lock() -> MutexGuard<'static, HashSet<i32>> {
    SPAWNED.lock()
}

/// The leader was reaped: its pid may be reused and is no longer ours.
pub(crate) fn forget_spawned(pid: i32) {
    SPAWNED.lock().remove(&pid);
}

/// Turns containment on for this process when asked and possible.
pub(crate) fn establish(asked: Containment) -> ContainmentStatus {
    match asked {
        Containment::None => {
            ContainmentStatus { mechanism: Containment::None, reason: "disabled by configuration".to_owned() }
        }
        Containment::Subreaper => become_subreaper(),
    }
}

#[cfg(target_os = "linux")]
fn become_subreaper() -> ContainmentStatus {
    // SAFETY: PR_SET_CHILD_SUBREAPER only changes which process adopts orphaned descendants;
    // it takes no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        ACTIVE.store(true, Ordering::SeqCst);
        ContainmentStatus {
            mechanism: Containment::Subreaper,
            reason: "stray descendants are adopted and killed; opt out with DSH_DETACH=1 and setsid"
                .to_owned(),
        }
    } else {
        ContainmentStatus {
            mechanism: Containment::None,
            reason: format!("prctl(PR_SET_CHILD_SUBREAPER) failed: {}", Errno::last()),
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() -> ContainmentStatus {
    ContainmentStatus { mechanism: Containment::None, reason: "child subreapers need Linux".to_owned() }
}

/// How often the reaper looks for strays when nothing asked.
const IDLE_SWEEP: std::time::Duration = std::time::Duration::from_secs(1);
/// The first and the longest wait before sweeping again for a killed, unreaped stray.
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(2);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// A service's reaper: a task that sweeps strays when asked and on a timer.
pub(crate) struct Reaper {
    wake: Arc<Notify>,
    started: std::sync::Once,
    /// Dropping the sender (with the service) ends the task.
    stop: watch::Sender<()>,
}

impl Reaper {
    pub(crate) fn new() -> Self {
        Self { wake: Arc::new(Notify::new()), started: std::sync::Once::new(), stop: watch::Sender::new(()) }
    }

    /// Starts the task on `runtime` the first time a tree is spawned. It sweeps when asked
    /// (after a leader exit whose own pass, [`Reaper::after_exit`], could not finish), again
    /// with a short backoff while a killed stray is not yet reaped, and once every
    /// [`IDLE_SWEEP`] for strays that exited on their own. No `SIGCHLD` stream: adoption sends
    /// no signal, the leaders' exits already sweep, and a signal-driven sweep per exit would
    /// double the harness's work on every call.
    pub(crate) fn ensure_started(&self, runtime: &tokio::runtime::Handle) {
        self.started.call_once(|| {
            let wake = Arc::clone(&self.wake);
            let mut stop = self.stop.subscribe();
            runtime.spawn(async move {
                let mut pending = 0;
                let mut retry = RETRY_FIRST;
                loop {
                    let after = if pending > 0 { retry } else { IDLE_SWEEP };
                    tokio::select! {
                        () = wake.notified() => retry = RETRY_FIRST,
                        () = tokio::time::sleep(after) => retry = (retry * 2).min(RETRY_MAX),
                        changed = stop.changed() => if changed.is_err() { return },
                    }
                    pending = sweep_scoped(Scope::Adopter);
                }
            });
        });
    }

    /// Asks for a sweep soon.
    fn wake(&self) {
        self.wake.notify_one();
    }

    /// After a leader's exit: the cheap pass made here and now when it needs no waiting (no
    /// other task is woken, so no other thread), else asked of the task (a spawn holds the
    /// lock, or a killed stray is not yet reaped and needs the task's retries).
    pub(crate) fn after_exit(&self) {
        let mut busy = false;
        let pending = sweep_with(
            Scope::Adopter,
            || {
                let guard = SPAWNED.try_lock();
                busy = guard.is_none();
                guard
            },
            |pgid| Some(crate::exit_guard::is_live_group(pgid)),
        );
        if pending > 0 || busy {
            self.wake();
        }
    }
}

/// Kills what is left of group `pgid` after its leader exited, sparing opted-out members.
/// Costs one `kill(-pgid, 0)` when nothing is left.
pub(crate) fn kill_leftovers(pgid: i32) {
    if matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH)) {
        return;
    }
    let members = group_members(pgid);
    let detached: Vec<i32> = members.iter().copied().filter(|pid| opted_out(*pid)).collect();
    if detached.is_empty() {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    } else {
        for pid in members.into_iter().filter(|pid| !detached.contains(pid)) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Which of the harness's threads a sweep lists the children of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Only the thread that adopts orphans. The kernel hands an orphan to the first live
    /// thread of the subreaper, which is the main thread for as long as the process runs, so
    /// one small read finds every stray: the cheap pass made after each exit.
    Adopter,
    /// Every thread (the main thread may be exiting, or the kernel may lack the files).
    All,
}

/// One pass over the harness's children; returns how many strays are still pending (killed
/// but not yet reaped, or not yet dead).
pub(crate) fn sweep() -> usize {
    sweep_scoped(Scope::All)
}

fn sweep_scoped(scope: Scope) -> usize {
    sweep_with(scope, || Some(SPAWNED.lock()), |pgid| Some(crate::exit_guard::is_live_group(pgid)))
}

/// One pass; `lock` gives the set of spawned leaders and `is_live` says whether a group is a
/// live tree's (`None`: unknown, so the candidate is spared). At exit both must not block.
fn sweep_with(
    scope: Scope,
    lock: impl FnOnce() -> Option<MutexGuard<'static, HashSet<i32>>>,
    is_live: impl Fn(i32) -> Option<bool>,
) -> usize {
    let me = std::process::id() as i32;
    let own_group = nix::unistd::getpgrp().as_raw();
    let children = children_of(me, scope);
    if children.is_empty() {
        return 0;
    }
    let candidates: Vec<i32> = {
        let Some(spawned) = lock() else { return 0 };
        // The guardian is a child of the harness in every listing: skip it before its
        // `/proc` entry is read (it would be spared below anyway).
        children
            .into_iter()
            .filter(|pid| !spawned.contains(pid) && !crate::guardian::is_guardian(*pid))
            .collect()
    };
    let mut pending = 0;
    for pid in candidates {
        let Some(stat) = read_stat(pid) else { continue };
        // The harness's own group is never touched, not even a zombie there: it may be a
        // direct child of other in-process code (`std::process::Command`) whose owner is
        // about to wait for it. So nothing may be orphaned into that group: in-process code
        // that starts children which may leave descendants behind starts them in a group of
        // their own with [`crate::GroupedChild`], which reaps what they leave.
        if stat.ppid != me || stat.pgrp == own_group || crate::guardian::is_guardian(pid) {
            continue;
        }
        if stat.state == 'Z' {
            reap(pid);
            continue;
        }
        if is_live(stat.pgrp) != Some(false) || opted_out(pid) {
            continue;
        }
        tracing::debug!(pid, pgrp = stat.pgrp, "killing a stray descendant");
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        // Its group is neither ours nor a live tree's (checked above).
        let _ = killpg(Pid::from_raw(stat.pgrp), Signal::SIGKILL);
        if !reap(pid) {
            pending += 1;
        }
    }
    pending
}

/// Reaps `pid` if it is a zombie; `true` when it is gone.
pub(crate) fn reap(pid: i32) -> bool {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    !matches!(waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive))
}

/// Sweeps until no stray is pending, for at most `bound`.
pub(crate) async fn settle_strays(bound: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + bound;
    let mut poll = std::time::Duration::from_millis(2);
    while sweep() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(poll).await;
        poll = (poll * 2).min(std::time::Duration::from_millis(50));
    }
}

/// At harness exit: kill every stray still around (best effort, no waiting, never blocking
/// on a lock another thread may hold while the process goes down).
pub(crate) fn sweep_at_exit() {
    if ACTIVE.load(Ordering::SeqCst) {
        let _ = sweep_with(Scope::All, || SPAWNED.try_lock(), crate::exit_guard::try_is_live_group);
    }
}

/// Whether the process's initial environment holds `DSH_DETACH=1`.
fn opted_out(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|entry| entry == DETACH_ENV.as_bytes()))
}

struct Stat {
    state: char,
    ppid: i32,
    pgrp: i32,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat { state, ppid, pgrp })
}

fn numeric_entries(dir: &str) -> impl Iterator<Item = i32> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()))
}

/// The children of `me`: of the adopting main thread alone ([`Scope::Adopter`]) when its
/// `children` file reads, else from every thread's `children` file, else from a `/proc` scan
/// when the kernel lacks those files.
fn children_of(me: i32, scope: Scope) -> Vec<i32> {
    if scope == Scope::Adopter
        && let Some(children) = adopter_children(me)
    {
        return children;
    }
    let mut children = Vec::new();
    let mut readable = false;
    for tid in numeric_entries("/proc/self/task") {
        if let Ok(list) = std::fs::read_to_string(format!("/proc/self/task/{tid}/children")) {
            readable = true;
            children.extend(parse_pids(&list));
        }
    }
    if !readable {
        children =
            numeric_entries("/proc").filter(|pid| read_stat(*pid).is_some_and(|s| s.ppid == me)).collect();
    }
    children
}

/// The main thread's children, read with one `pread` from a `children` file kept open (the
/// kernel regenerates it on every read from offset 0). `None` when it cannot be read.
fn adopter_children(me: i32) -> Option<Vec<i32>> {
    use std::os::unix::fs::FileExt;
    static FILE: LazyLock<Mutex<Option<(i32, std::fs::File)>>> = LazyLock::new(|| Mutex::new(None));
    let mut cached = FILE.lock();
    // A forked copy of the harness has another pid: reopen for it.
    if cached.as_ref().is_none_or(|(pid, _)| *pid != me) {
        let file = std::fs::File::open(format!("/proc/self/task/{me}/children")).ok()?;
        *cached = Some((me, file));
    }
    let (_, file) = cached.as_ref()?;
    let mut buf = [0u8; 4096];
    let mut text = Vec::new();
    loop {
        let n = file.read_at(&mut buf, text.len() as u64).ok()?;
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
    }
    Some(parse_pids(std::str::from_utf8(&text).ok()?).collect())
}

/// The pids of a `children` file: decimal numbers separated by spaces.
fn parse_pids(list: &str) -> impl Iterator<Item = i32> + '_ {
    list.split_whitespace().filter_map(|pid| pid.parse::<i32>().ok())
}

/// Every member of group `pgid` (zombies included), with its parent.
pub(crate) fn group_members_with_parent(pgid: i32) -> Vec<(i32, i32)> {
    numeric_entries("/proc")
        .filter_map(|pid| read_stat(pid).filter(|s| s.pgrp == pgid).map(|s| (pid, s.ppid)))
        .collect()
}

/// Live (non-zombie) members of group `pgid` and every live descendant of one (a runner such
/// as bubblewrap starts the command in a session and group of its own), from a fresh scan of
/// `/proc`.
pub(crate) fn tree_members(pgid: i32) -> Vec<i32> {
    members_in(&scan_live(), pgid)
}

/// Like [`tree_members`], from a scan at most [`RECENT_SCAN`] old: one scan serves every job
/// a listing or the waiting watchers ask about in that time. For questions a moment's
/// staleness cannot hurt (whether a job waits for input), never for killing.
pub(crate) fn recent_tree_members(pgid: i32) -> Vec<i32> {
    static RECENT: Mutex<Option<(std::time::Instant, ProcTable)>> = Mutex::new(None);
    let table = {
        let mut recent = RECENT.lock();
        match &*recent {
            Some((at, table)) if at.elapsed() < RECENT_SCAN => Arc::clone(table),
            _ => {
                let table = Arc::new(scan_live());
                *recent = Some((std::time::Instant::now(), Arc::clone(&table)));
                table
            }
        }
    };
    members_in(&table, pgid)
}

/// Every live process with its stat, as one scan of `/proc` saw them.
type ProcTable = Arc<Vec<(i32, Stat)>>;

/// How long a `/proc` scan serves [`recent_tree_members`].
const RECENT_SCAN: std::time::Duration = std::time::Duration::from_millis(100);

/// Full `/proc` scans made so far (for tests).
static SCANS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Every live (non-zombie) process with its stat.
fn scan_live() -> Vec<(i32, Stat)> {
    SCANS.fetch_add(1, Ordering::Relaxed);
    numeric_entries("/proc")
        .filter_map(|pid| read_stat(pid).filter(|s| s.state != 'Z' && s.state != 'X').map(|s| (pid, s)))
        .collect()
}

/// The members of group `pgid` in `procs` and every descendant of one.
fn members_in(procs: &[(i32, Stat)], pgid: i32) -> Vec<i32> {
    let mut members: Vec<i32> = procs.iter().filter(|(_, s)| s.pgrp == pgid).map(|(pid, _)| *pid).collect();
    loop {
        let before = members.len();
        for (pid, stat) in procs {
            if !members.contains(pid) && members.contains(&stat.ppid) {
                members.push(*pid);
            }
        }
        if members.len() == before {
            return members;
        }
    }
}

/// Live (non-zombie) members of group `pgid`.
pub(crate) fn group_members(pgid: i32) -> Vec<i32> {
    numeric_entries("/proc")
        .filter(|pid| read_stat(*pid).is_some_and(|s| s.pgrp == pgid && s.state != 'Z' && s.state != 'X'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_recent_scan_serves_many_questions() {
        let me = nix::unistd::getpgrp().as_raw();
        let before = SCANS.load(Ordering::Relaxed);
        for _ in 0..50 {
            assert!(recent_tree_members(me).contains(&(std::process::id() as i32)));
        }
        let scans = SCANS.load(Ordering::Relaxed) - before;
        // One scan, or a few if the thread was descheduled past the window (never one each).
        assert!((1..10).contains(&scans), "{scans} scans for 50 questions");
        let fresh = SCANS.load(Ordering::Relaxed);
        tree_members(me);
        assert!(SCANS.load(Ordering::Relaxed) > fresh, "tree_members scans afresh");
    }

    #[test]
    fn parses_ppid_and_group() {
        let stat = parse_stat("42 (a) b) S 7 42 42 0").expect("stat");
        assert_eq!((stat.state, stat.ppid, stat.pgrp), ('S', 7, 42));
        assert!(parse_stat("garbage").is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn orphans_are_adopted_by_the_main_thread() {
        assert!(establish(Containment::Subreaper).is_active());
        let me = std::process::id() as i32;
        // Spawned from a thread other than main, like a runtime worker does.
        let orphan = std::thread::spawn(|| {
            let out = std::process::Command::new("sh")
                .args(["-c", "sleep 30 </dev/null >/dev/null 2>&1 & echo $!"])
                .output()
                .expect("sh");
            String::from_utf8_lossy(&out.stdout).trim().parse::<i32>().expect("pid")
        })
        .join()
        .expect("thread");
        let adopted = adopter_children(me).expect("the main thread's children file reads");
        let _ = kill(Pid::from_raw(orphan), Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(Pid::from_raw(orphan), None);
        assert!(adopted.contains(&orphan), "{orphan} not in {adopted:?}");
        assert!(children_of(me, Scope::All).iter().all(|pid| *pid != orphan), "reaped");
    }

    #[test]
    fn status_reads_for_a_report() {
        let off = establish(Containment::None);
        assert_eq!(off.to_string(), "none (disabled by configuration)");
        assert!(!off.is_active());
    }
}
