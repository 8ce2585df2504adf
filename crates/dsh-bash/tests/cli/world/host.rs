//! Host-side facts and fixtures: who we are, where the binary and tools are, a terminal of
//! our own, processes outside the sandbox, and the host's process table.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::cell::User;

/// A string of digits no other test or run uses (pid, counter, clock), for markers that
/// must parse as numbers (`sleep 300.N`).
pub fn unique_number() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}{n}{nanos:09}", std::process::id())
}

/// A name no other test or run uses: `<prefix>-<unique number>`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", unique_number())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `true` when the environment says this is CI (`CI=true`).
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// `(uid, gid)` of `nobody` from the passwd database, if the user exists.
pub fn nobody_ids() -> Option<(u32, u32)> {
    static IDS: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *IDS.get_or_init(|| {
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"nobody") && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
    })
}

/// Gives `path` and everything under it to `uid:gid` (symlinks themselves, not targets).
pub fn chown_tree(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        for entry in std::fs::read_dir(path).expect("read_dir") {
            chown_tree(&entry.expect("dir entry").path(), uid, gid);
        }
    }
}

/// Whether `user` may search every directory above `path` and execute `path` itself
/// (owner bits are not consulted for `nobody`: nothing here is owned by it).
fn reachable(path: &Path, user: User) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    if user == User::Root {
        return meta.is_file() && meta.mode() & 0o111 != 0;
    }
    let others_can = |p: &Path, bit: u32| std::fs::metadata(p).is_ok_and(|m| m.mode() & bit != 0);
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    meta.is_file()
        && others_can(&canonical, 0o001)
        && [path, canonical.as_path()]
            .iter()
            .all(|p| p.ancestors().skip(1).all(|dir| dir.as_os_str().is_empty() || others_can(dir, 0o001)))
}

/// `tool` on `path_env` as `user` can run it.
pub fn find_tool(tool: &str, path_env: &str, user: User) -> Option<PathBuf> {
    path_env
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(tool))
        .find(|p| reachable(p, user))
}

/// Where `runuser` (util-linux) is, if installed.
pub fn runuser() -> Option<PathBuf> {
    find_tool("runuser", "/usr/sbin:/usr/bin:/sbin:/bin", User::Root)
}

/// The directory of the toolchain running this test (`$CARGO`'s, so no rustup proxy), if any.
pub fn toolchain_bin() -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .or_else(|| find_tool("cargo", &std::env::var("PATH").unwrap_or_default(), User::Root))?;
    Some(cargo.parent()?.to_path_buf())
}

/// The `dsh-bash` binary as `user` can execute it: the built one when every directory above
/// it is searchable by others, else a copy in a root-owned mode-0755 directory under
/// `/var/tmp` named after the build's size and mtime. The copy is kept for later runs of the
/// same build; copies of other builds are removed when a new one is made.
pub fn binary_for(user: User) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_dsh-bash"));
    if user == User::Root || reachable(&built, user) {
        return built;
    }
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        let meta = std::fs::metadata(&built).expect("stat dsh-bash");
        let prefix = "dsh-bash-world-bin-";
        let dir = PathBuf::from(format!("/var/tmp/{prefix}{}-{}", meta.len(), meta.mtime()));
        let copy = dir.join("dsh-bash");
        if std::fs::create_dir(&dir).is_ok() {
            for stale in std::fs::read_dir("/var/tmp").into_iter().flatten().flatten() {
                let name = stale.file_name();
                if name.to_string_lossy().starts_with(prefix) && stale.path() != dir {
                    let _ = std::fs::remove_dir_all(stale.path());
                }
            }
        }
        // /var/tmp is world-writable: use the directory only if root made it, as made here.
        let made = std::fs::symlink_metadata(&dir).expect("stat the binary copy directory");
        assert!(
            made.is_dir() && made.uid() == 0 && made.mode() & 0o022 == 0,
            "{} is not a root-owned directory only root can write; remove it",
            dir.display()
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        if !copy.exists() {
            let partial = dir.join(format!("dsh-bash.{}", std::process::id()));
            std::fs::copy(&built, &partial).expect("copy dsh-bash");
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            std::fs::rename(&partial, &copy).expect("rename binary copy");
        }
        copy
    })
    .clone()
}

/// A pseudo-terminal pair opened by the test.
pub struct Pty {
    /// Held so the terminal stays alive (never read: nothing is expected on it).
    _master: OwnedFd,
    pub slave: OwnedFd,
    /// `N` of `/dev/pts/N`.
    pub number: u32,
}

impl Pty {
    pub fn open() -> Pty {
        let ptmx = CString::new("/dev/ptmx").expect("path");
        // SAFETY: a plain open of a NUL-terminated path; the fd is owned below.
        let master = unsafe { libc::open(ptmx.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
        assert!(master >= 0, "open /dev/ptmx: {}", std::io::Error::last_os_error());
        // SAFETY: `master` was just opened and is owned by nobody else.
        let master = unsafe { OwnedFd::from_raw_fd(master) };
        let mut number: libc::c_uint = 0;
        // SAFETY: TIOCSPTLCK reads an int, TIOCGPTN writes an unsigned int; both point at locals.
        unsafe {
            let unlock: libc::c_int = 0;
            assert_eq!(libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock), 0, "unlock pty");
            assert_eq!(libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut number), 0, "pty number");
        }
        let path = CString::new(format!("/dev/pts/{number}")).expect("path");
        // SAFETY: as above.
        let slave = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
        assert!(slave >= 0, "open /dev/pts/{number}: {}", std::io::Error::last_os_error());
        // SAFETY: `slave` was just opened and is owned by nobody else.
        let slave = unsafe { OwnedFd::from_raw_fd(slave) };
        Pty { _master: master, slave, number }
    }

    /// Everything waiting to be read on the terminal's input side (typed or injected), read
    /// without blocking (a canonical-mode read returns one line at a time).
    pub fn pending_input(&self) -> Vec<u8> {
        let fd = self.slave.as_raw_fd();
        let mut pending = Vec::new();
        let mut buf = [0u8; 4096];
        // SAFETY: fcntl on an fd we own.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        loop {
            // SAFETY: reads into a local buffer of the given length.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return pending;
            }
            pending.extend_from_slice(&buf[..n as usize]);
        }
    }
}

/// A process the test started outside the sandbox, killed and reaped when dropped.
pub struct Outsider(pub Child);

impl Outsider {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it still runs (not exited, not killed).
    pub fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Outsider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The argv of `pid`, empty for a zombie or a process that is gone.
pub fn argv_of(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every live host process one of whose arguments contains `marker`.
pub fn pids_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && argv_of(pid).iter().any(|a| a.contains(marker)) {
            pids.push(pid);
        }
    }
    pids
}

/// The children of `pid` (all its threads'), from `/proc`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    children
}

/// Polls `condition` every 20 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if condition() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILLs `pid` (a process the test knows it started, directly or through the sandbox).
pub fn sigkill(pid: u32) {
    // SAFETY: kill(2) has no memory preconditions; the pid is one this test identified.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
}

pub use crate::harness::shell_quote as q;

/// The `name: word` lines of a report, as `(name, word)` with anything after the first word
/// (an errno's text in parentheses) dropped.
pub fn verdicts(report: &str) -> Vec<(String, String)> {
    report
        .lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, rest)| (name.to_owned(), rest.split_whitespace().next().unwrap_or_default().to_owned()))
        .collect()
}

/// Removes a host file when dropped: the test's own, or one a sandbox let leak.
pub struct Removed(pub PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
