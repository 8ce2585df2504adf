//! Per-spawn resource limits, enforced by the kernel, and what a spawn used.
//!
//! Where the harness may create control groups under its own (as root on a host with cgroup
//! v1's `pids` and `memory` hierarchies, or where its own cgroup v2 group is writable), each
//! limited spawn gets a group of its own in each hierarchy: the child joins it before `exec`
//! (it writes `0` to the group's `cgroup.procs`, a descriptor opened before the start), so
//! everything it starts is counted and bounded together — processes (`pids.max`, threads
//! included) and memory (`memory.limit_in_bytes` / `memory.max`, the kernel's out-of-memory
//! killer acting inside the group only). The group is emptied and removed once the tree is
//! gone. Elsewhere the child gets resource limits (`setrlimit`) before `exec`:
//! `RLIMIT_NPROC` for processes, which counts every task of the *user* (not only the call's),
//! so the limit set is the user's tasks when the harness first limited a spawn plus the
//! configured number, and does nothing for root; `RLIMIT_DATA` for memory, per process, and
//! only when asked for ([`ResourceLimits::memory_per_process`]). CPU time is always
//! `RLIMIT_CPU`, per process.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What one spawn (and everything it starts) may use. `None` leaves a resource unbounded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Processes (and threads) alive at once.
    pub processes: Option<u64>,
    /// Bytes of memory (with a control group: the whole tree's, page cache included).
    pub memory: Option<u64>,
    /// Without a control group, bound each process's data segment (`RLIMIT_DATA`) by
    /// `memory` instead. Off by default: a per-process bound is a weak stand-in that breaks
    /// programs reserving large writable mappings.
    pub memory_per_process: bool,
    /// Seconds of CPU time per process (`RLIMIT_CPU`: `SIGXCPU`, then `SIGKILL`).
    pub cpu_seconds: Option<u64>,
}

impl Enforcement {
    /// The name results and documentation use: `cgroup-v1`, `cgroup-v2`, `rlimit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::CgroupV1 => "cgroup-v1",
            Enforcement::CgroupV2 => "cgroup-v2",
            Enforcement::Rlimit => "rlimit",
        }
    }
}

impl ResourceLimits {
    /// Whether any resource is bounded.
    pub fn any(&self) -> bool {
        self.processes.is_some() || self.memory.is_some() || self.cpu_seconds.is_some()
    }
}

/// What a settled spawn used, as far as the kernel told.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceUsage {
    /// User and system CPU time of the direct child and every descendant it waited for (or,
    /// with a control group, of every member).
    pub cpu_time: Option<Duration>,
    /// With a control group, the tree's peak memory; otherwise the largest resident set of
    /// one process (the direct child or a descendant it waited for).
    pub peak_memory_bytes: Option<u64>,
    /// With a control group, the most processes (threads included) alive at once.
    pub peak_processes: Option<u64>,
    /// The process limit, when it refused a fork (known with a control group only).
    pub process_limit_reached: Option<u64>,
    /// The memory limit, when the kernel's out-of-memory killer acted inside the group.
    pub memory_limit_reached: Option<u64>,
    /// How the spawn's limits were enforced; `None` without limits.
    pub enforcement: Option<Enforcement>,
}

/// How the limits of one spawn are enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// Control groups v1 (`pids`, `memory`).
    CgroupV1,
    /// A control group v2.
    CgroupV2,
    /// Resource limits of each process.
    Rlimit,
}

/// Where this process's groups are, and which may take children.
#[derive(Debug)]
enum Hierarchies {
    V1 { pids: Option<PathBuf>, memory: Option<PathBuf> },
    V2 { dir: PathBuf },
    None,
}

static HIERARCHIES: OnceLock<Hierarchies> = OnceLock::new();
static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);
/// Groups that still had members when their spawn was over (a detached daemon): removed at
/// a later spawn once empty.
static LEFT_OVER: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

/// A line of `/proc/self/mountinfo` naming a cgroup mount: (root in the hierarchy, mount
/// point, filesystem type, super options).
fn cgroup_mounts() -> Vec<(String, PathBuf, String, String)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let _source = right.next()?;
            let options = right.next().unwrap_or("");
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some((
                fields.get(3)?.to_string(),
                PathBuf::from(fields.get(4)?),
                fstype.to_owned(),
                options.to_owned(),
            ))
        })
        .collect()
}

/// This process's group in a hierarchy, as a directory: the mount point plus the group's
/// path below the mount's root.
fn own_dir(mount_root: &str, mount_point: &Path, group: &str) -> Option<PathBuf> {
    let below = if mount_root == "/" { group } else { group.strip_prefix(mount_root)? };
    Some(mount_point.join(below.trim_start_matches('/')))
}

/// Whether a child group can be made (and removed) in `dir`, and has `file` (its
/// controller's limit) once made.
fn can_make_child(dir: &Path, file: &str) -> bool {
    let probe = dir.join(format!("dsh-{}-probe", std::process::id()));
    if std::fs::create_dir(&probe).is_err() {
        return false;
    }
    let usable = probe.join(file).exists();
    let _ = std::fs::remove_dir(&probe);
    usable
}

fn detect() -> Hierarchies {
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else { return Hierarchies::None };
    let mounts = cgroup_mounts();
    let group_of = |controller: &str| {
        own.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers.split(',').any(|c| c == controller).then(|| path.to_owned())
        })
    };
    let v1 = |controller: &str, file: &str| {
        let group = group_of(controller)?;
        let (root, point, _, _) = mounts.iter().find(|(_, _, fstype, options)| {
            fstype == "cgroup" && options.split(',').any(|o| o == controller)
        })?;
        let dir = own_dir(root, point, &group)?;
        can_make_child(&dir, file).then_some(dir)
    };
    let pids = v1("pids", "pids.max");
    let memory = v1("memory", "memory.limit_in_bytes");
    if pids.is_some() || memory.is_some() {
        return Hierarchies::V1 { pids, memory };
    }
    // cgroup v2: the line `0::/path`.
    let Some(group) = own.lines().find_map(|line| line.strip_prefix("0::")) else { return Hierarchies::None };
    let Some((root, point, _, _)) = mounts.iter().find(|(_, _, fstype, _)| fstype == "cgroup2") else {
        return Hierarchies::None;
    };
    let Some(dir) = own_dir(root, point, group) else { return Hierarchies::None };
    match v2_delegate(&dir) {
        Some(dir) => Hierarchies::V2 { dir },
        None => Hierarchies::None,
    }
}

/// A cgroup v2 directory under which call groups get the `pids` and `memory` controllers:
/// this process's own group once the controllers are enabled for its children. A group with
/// members cannot enable them, so this process first moves into a leaf of its own
/// (`dsh-harness`) — only when it is the group's one member. `None` when any step is refused.
fn v2_delegate(dir: &Path) -> Option<PathBuf> {
    let enabled = |dir: &Path| {
        std::fs::read_to_string(dir.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
    };
    if enabled(dir) && can_make_child(dir, "pids.max") {
        return Some(dir.to_owned());
    }
    let available = std::fs::read_to_string(dir.join("cgroup.controllers")).ok()?;
    if !available.split_whitespace().any(|c| c == "pids") {
        return None;
    }
    let members = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    let me = std::process::id().to_string();
    if members.lines().any(|pid| pid.trim() != me) {
        return None;
    }
    let leaf = dir.join("dsh-harness");
    if std::fs::create_dir(&leaf).is_err() && !leaf.is_dir() {
        return None;
    }
    std::fs::write(leaf.join("cgroup.procs"), &me).ok()?;
    let wanted: String = ["pids", "memory"]
        .iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c))
        .map(|c| format!("+{c} "))
        .collect();
    if std::fs::write(dir.join("cgroup.subtree_control"), wanted.trim_end()).is_err() {
        let _ = std::fs::write(dir.join("cgroup.procs"), &me);
        let _ = std::fs::remove_dir(&leaf);
        return None;
    }
    can_make_child(dir, "pids.max").then(|| dir.to_owned())
}

fn hierarchies() -> &'static Hierarchies {
    HIERARCHIES.get_or_init(|| {
        let found = detect();
        let parents: Vec<&Path> = match &found {
            Hierarchies::V1 { pids, memory } => {
                pids.iter().chain(memory.iter()).map(PathBuf::as_path).collect()
            }
            Hierarchies::V2 { dir } => vec![dir.as_path()],
            Hierarchies::None => Vec::new(),
        };
        parents.into_iter().for_each(remove_stale_groups);
        if !matches!(found, Hierarchies::None) {
            // SAFETY: `atexit` only records a function pointer; the hook takes no borrowed
            // state and never blocks on a lock.
            unsafe { libc::atexit(remove_groups_at_exit) };
        }
        found
    })
}

/// Removes the empty groups `dsh-<pid>-<n>` of harnesses that are gone (one killed before it
/// could remove its last call's), once a minute old: a harness in another PID namespace,
/// whose pid this one cannot see, may have made one a moment ago for a child about to join.
fn remove_stale_groups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    let old = |entry: &std::fs::DirEntry| {
        entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > Duration::from_secs(60)))
    };
    for entry in entries.flatten().filter(old) {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("dsh-")).and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if pid.parse::<u32>().is_ok_and(|p| p != std::process::id()) && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The groups of spawns not yet over, removed (when empty by then) as the harness exits.
static LIVE: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

extern "C" fn remove_groups_at_exit() {
    // Never block at exit: another thread may hold the lock while the process goes down.
    if let Some(live) = LIVE.try_lock() {
        for dir in live.iter() {
            remove_group_waiting(dir, true);
        }
    }
    if let Some(left) = LEFT_OVER.try_lock() {
        for dir in left.iter() {
            remove_group_waiting(dir, true);
        }
    }
}

/// How limits are enforced on this host for this process, before any spawn.
pub fn enforcement() -> Enforcement {
    match hierarchies() {
        Hierarchies::V1 { .. } => Enforcement::CgroupV1,
        Hierarchies::V2 { .. } => Enforcement::CgroupV2,
        Hierarchies::None => Enforcement::Rlimit,
    }
}

/// The tasks (threads included) of this process's real user when first asked, for
/// `RLIMIT_NPROC`, which counts them all.
fn user_tasks() -> u64 {
    static TASKS: OnceLock<u64> = OnceLock::new();
    *TASKS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: getuid never fails.
        let uid = unsafe { libc::getuid() };
        let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
        entries
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
            .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
            .map(|e| {
                std::fs::read_to_string(e.path().join("stat"))
                    .ok()
                    .and_then(|stat| {
                        let after = &stat[stat.rfind(')')? + 2..];
                        after.split(' ').nth(17)?.parse::<u64>().ok()
                    })
                    .unwrap_or(1)
            })
            .sum()
    })
}

/// One control group made for a spawn.
#[derive(Debug)]
struct Group {
    dir: PathBuf,
    /// Its `cgroup.procs`, open for writing: the child writes `0` to join.
    procs: OwnedFd,
}

/// The limits of one spawn, ready before the start: the groups to join and the resource
/// limits to set, all applied by the child with plain system calls.
#[derive(Debug)]
pub(crate) struct SpawnLimits {
    limits: ResourceLimits,
    groups: Vec<Group>,
    /// `(resource, value)` pairs for `setrlimit`.
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    enforcement: Enforcement,
    /// The `pids.max` and memory limit groups (indexes into `groups`), to read usage from.
    pids: Option<usize>,
    memory: Option<usize>,
}

fn make_group(parent: &Path, name: &str, settings: &[(&str, String)]) -> Option<Group> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = parent.join(name);
    if let Err(e) = std::fs::create_dir(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot make a control group for a call");
        return None;
    }
    for (file, value) in settings {
        // Best effort for the swap files, missing without swap accounting.
        if let Err(e) = std::fs::write(dir.join(file), value)
            && !file.contains("sw")
        {
            tracing::warn!(dir = %dir.display(), file, error = %e, "cannot set a control group limit");
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
    }
    let procs =
        std::fs::OpenOptions::new().write(true).custom_flags(libc::O_CLOEXEC).open(dir.join("cgroup.procs"));
    match procs {
        Ok(procs) => {
            LIVE.lock().push(dir.clone());
            Some(Group { dir, procs: procs.into() })
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot open a control group");
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }
}

impl SpawnLimits {
    /// Makes the groups (or plans the resource limits) for one spawn.
    pub(crate) fn prepare(limits: &ResourceLimits) -> Self {
        retry_left_over();
        let mut this = Self {
            limits: limits.clone(),
            groups: Vec::new(),
            rlimits: Vec::new(),
            enforcement: Enforcement::Rlimit,
            pids: None,
            memory: None,
        };
        let name = format!("dsh-{}-{}", std::process::id(), NEXT_GROUP.fetch_add(1, Ordering::Relaxed));
        let mut pids_bounded = false;
        let mut memory_bounded = false;
        match hierarchies() {
            Hierarchies::V1 { pids, memory } => {
                if let Some(parent) = pids {
                    let max = limits.processes.map_or_else(|| "max".to_owned(), |n| n.to_string());
                    if let Some(group) = make_group(parent, &name, &[("pids.max", max)]) {
                        this.pids = Some(this.groups.len());
                        this.groups.push(group);
                        pids_bounded = true;
                    }
                }
                if let Some(parent) = memory {
                    let settings: Vec<(&str, String)> = match limits.memory {
                        Some(bytes) => vec![
                            ("memory.limit_in_bytes", bytes.to_string()),
                            ("memory.memsw.limit_in_bytes", bytes.to_string()),
                        ],
                        None => Vec::new(),
                    };
                    if let Some(group) = make_group(parent, &name, &settings) {
                        this.memory = Some(this.groups.len());
                        this.groups.push(group);
                        memory_bounded = true;
                    }
                }
                if !this.groups.is_empty() {
                    this.enforcement = Enforcement::CgroupV1;
                }
            }
            Hierarchies::V2 { dir } => {
                let mut settings = Vec::new();
                if let Some(n) = limits.processes {
                    settings.push(("pids.max", n.to_string()));
                }
                if let Some(bytes) = limits.memory {
                    settings.push(("memory.max", bytes.to_string()));
                    settings.push(("memory.swap.max", "0".to_owned()));
                }
                if let Some(group) = make_group(dir, &name, &settings) {
                    this.pids = Some(0);
                    this.memory = Some(0);
                    this.groups.push(group);
                    this.enforcement = Enforcement::CgroupV2;
                    pids_bounded = true;
                    memory_bounded = true;
                }
            }
            Hierarchies::None => {}
        }
        if !pids_bounded && let Some(n) = limits.processes {
            // SAFETY: geteuid never fails.
            if unsafe { libc::geteuid() } != 0 {
                this.rlimits.push((libc::RLIMIT_NPROC, user_tasks().saturating_add(n) as libc::rlim_t));
            }
        }
        if !memory_bounded
            && limits.memory_per_process
            && let Some(bytes) = limits.memory
        {
            this.rlimits.push((libc::RLIMIT_DATA, bytes as libc::rlim_t));
        }
        if let Some(seconds) = limits.cpu_seconds {
            this.rlimits.push((libc::RLIMIT_CPU, seconds as libc::rlim_t));
        }
        this
    }

    /// In the child, before `exec` (and before any sandbox hook, so whatever the hook starts
    /// is in the groups too): join the groups, set the resource limits. Async-signal-safe:
    /// `write(2)` and `setrlimit(2)` of data made before the start.
    pub(crate) fn apply_in_child(&self) -> Result<(), nix::errno::Errno> {
        for group in &self.groups {
            // SAFETY: writing a static byte to a descriptor opened before the start.
            if unsafe { libc::write(group.procs.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
                return Err(nix::errno::Errno::last());
            }
        }
        for (resource, value) in &self.rlimits {
            // A hard limit below the value is kept (an unprivileged process cannot raise it).
            let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: getrlimit fills the struct on the stack.
            unsafe { libc::getrlimit(*resource, &mut current) };
            let value = (*value).min(current.rlim_max);
            let wanted = libc::rlimit { rlim_cur: value, rlim_max: current.rlim_max };
            // SAFETY: setrlimit reads the struct on the stack.
            if unsafe { libc::setrlimit(*resource, &wanted) } < 0 {
                return Err(nix::errno::Errno::last());
            }
        }
        Ok(())
    }

    /// What the spawn used, from its groups and the direct child's `rusage`.
    pub(crate) fn usage(&self, rusage: Option<&libc::rusage>) -> ResourceUsage {
        let read = |index: Option<usize>, file: &str| {
            let group = &self.groups[index?];
            std::fs::read_to_string(group.dir.join(file)).ok()
        };
        let number = |text: Option<String>| text.and_then(|t| t.trim().parse::<u64>().ok());
        let counter = |text: Option<String>, key: &str| {
            text.and_then(|t| {
                t.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse::<u64>().ok()))
            })
        };
        let mut usage = rusage_usage(rusage);
        usage.enforcement = Some(self.enforcement);
        match self.enforcement {
            Enforcement::CgroupV1 => {
                if let Some(peak) = number(read(self.memory, "memory.max_usage_in_bytes")) {
                    usage.peak_memory_bytes = Some(peak);
                }
                if counter(read(self.memory, "memory.oom_control"), "oom_kill ").is_some_and(|n| n > 0) {
                    usage.memory_limit_reached = self.limits.memory;
                }
            }
            Enforcement::CgroupV2 => {
                if let Some(peak) = number(read(self.memory, "memory.peak")) {
                    usage.peak_memory_bytes = Some(peak);
                }
                if counter(read(self.memory, "memory.events"), "oom_kill ").is_some_and(|n| n > 0) {
                    usage.memory_limit_reached = self.limits.memory;
                }
            }
            Enforcement::Rlimit => {}
        }
        if self.pids.is_some() {
            usage.peak_processes = number(read(self.pids, "pids.peak"));
            if counter(read(self.pids, "pids.events"), "max ").is_some_and(|n| n > 0) {
                usage.process_limit_reached = self.limits.processes;
            }
        }
        usage
    }
}

impl Drop for SpawnLimits {
    /// Removes the groups (dropped once the tree is gone, or when the spawn failed). A group
    /// that keeps members (a process that opted out of containment, which keeps its limits)
    /// is removed at a later spawn once empty, or left for the system when the harness ends
    /// first.
    fn drop(&mut self) {
        for group in self.groups.drain(..) {
            drop(group.procs);
            // The tree is gone by now, but the last members of a namespace may still be
            // on their way out: wait for them a little.
            let removed = remove_group_waiting(&group.dir, true);
            LIVE.lock().retain(|dir| *dir != group.dir);
            if !removed {
                LEFT_OVER.lock().push(group.dir);
            }
        }
    }
}

/// What a spawn without limits used: the direct child's `rusage` only.
pub(crate) fn rusage_usage(rusage: Option<&libc::rusage>) -> ResourceUsage {
    let mut usage = ResourceUsage::default();
    if let Some(r) = rusage {
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        usage.cpu_time = Some(Duration::from_micros(micros(r.ru_utime) + micros(r.ru_stime)));
        usage.peak_memory_bytes = Some(r.ru_maxrss as u64 * 1024);
    }
    usage
}

/// Removes an empty group (retrying briefly while members that just died are released);
/// with `dying`, also while members are listed (they were killed and are going).
fn remove_group_waiting(dir: &Path, dying: bool) -> bool {
    for _ in 0..if dying { 100 } else { 20 } {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return true;
        }
        let members = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        if !dying && !members.trim().is_empty() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

fn remove_group(dir: &Path) -> bool {
    remove_group_waiting(dir, false)
}

fn retry_left_over() {
    let mut left = LEFT_OVER.lock();
    if !left.is_empty() {
        left.retain(|dir| !remove_group(dir));
    }
}
