//! The direct start: `posix_spawn` with an environment made mostly of C strings built once.
//!
//! A child that needs no code of ours between `fork` and `exec` (no hook, no new session, no
//! terminal, no shared file) is started here rather than through the standard library's
//! `Command`. The work is the same (`posix_spawn`, whose child shares the harness's memory
//! until it `exec`s), but `Command` copies every environment variable three times on every
//! start (into its own map, into the captured one, into C strings); here the scrubbed ambient
//! part is a list of C strings made once per service, and only the call's own variables are
//! converted. The child gets what a forked start gives it: a process group of its own, an
//! empty signal mask, every signal at its default action, the working directory, and exactly
//! the three standard descriptors (with the GNU C library every other one is closed in the child;
//! elsewhere every descriptor is marked close-on-exec just before the start).

use std::ffi::{CString, OsStr, OsString, c_char};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;

/// The scrubbed ambient environment as `NAME=value` C strings, in the order of the pairs they
/// were made from.
pub(crate) struct InheritedEntries(Vec<CString>);

impl InheritedEntries {
    pub(crate) fn new(inherited: &[(OsString, OsString)]) -> Self {
        Self(inherited.iter().map(|(name, value)| entry(name, value).unwrap_or_default()).collect())
    }
}

/// `NAME=value` as a C string; `None` when either holds a NUL byte.
fn entry(name: &OsStr, value: &OsStr) -> Option<CString> {
    let mut bytes = Vec::with_capacity(name.len() + value.len() + 2);
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value.as_bytes());
    CString::new(bytes).ok()
}

fn c_string(text: &[u8]) -> Result<CString, Errno> {
    CString::new(text).map_err(|_| Errno::EINVAL)
}

/// The parent's ends of a directly started child's standard streams (the output ends already
/// non-blocking).
pub(crate) struct Direct {
    pub(crate) pid: i32,
    /// The write end of the child's stdin, when it is a pipe.
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// What a direct start runs, and where.
pub(crate) struct Image<'a> {
    pub(crate) executable: &'a Path,
    /// `argv[0]` and the arguments.
    pub(crate) argv: &'a [String],
    /// The final environment: the inherited pairs that survived (borrowed, in order), then
    /// the call's own.
    pub(crate) env: &'a [(&'a OsStr, &'a OsStr)],
    /// The pairs `env` borrows its inherited part from, and their C strings.
    pub(crate) inherited: (&'a [(OsString, OsString)], &'a InheritedEntries),
    pub(crate) cwd: Option<&'a Path>,
    /// Stdin is a pipe (else `/dev/null`).
    pub(crate) stdin_piped: bool,
}

/// A close-on-exec pipe, both ends with the status `flags`: (read end, write end).
fn pipe(flags: libc::c_int) -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | flags) } < 0 {
        return Err(Errno::last());
    }
    // SAFETY: both descriptors were just created and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A close-on-exec pipe for a child's output: (read end, non-blocking, for the runtime; write
/// end, blocking, for the child).
fn output_pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    let (read, write) = pipe(libc::O_NONBLOCK)?;
    // The flags belong to each end's file description, which the child's descriptor 1 or 2
    // shares: its end blocks, as a program expects of its output. A fresh pipe has no other
    // status flag to keep.
    // SAFETY: setting the status flags of a descriptor owned here.
    if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETFL, 0) } < 0 {
        return Err(Errno::last());
    }
    Ok((read, write))
}

/// Output pipes for one start, made while the harness had nothing else to do.
type OutputPipes = [(OwnedFd, OwnedFd); 2];

/// The spare pair of output pipes: the next direct start takes it, and the supervisor of a
/// finished child makes the next one once the result is on its way ([`refill_spare`]). Four
/// idle close-on-exec descriptors; no child inherits them (see [`spawn`]'s file actions and
/// the forked start's prelude).
static SPARE: std::sync::Mutex<Option<OutputPipes>> = std::sync::Mutex::new(None);

/// Makes the spare pair of output pipes when there is none (best effort: a start that finds
/// none makes its own).
pub(crate) fn refill_spare() {
    let mut spare = SPARE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if spare.is_none() {
        *spare = output_pipe().and_then(|stdout| Ok([stdout, output_pipe()?])).ok();
    }
}

/// The spare output pipes, or new ones.
fn output_pipes() -> Result<OutputPipes, Errno> {
    let spare = SPARE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    match spare {
        Some(pipes) => Ok(pipes),
        None => Ok([output_pipe()?, output_pipe()?]),
    }
}

/// Sets `O_NONBLOCK` on a descriptor this process owns.
pub(crate) fn set_nonblocking(fd: &OwnedFd) {
    // SAFETY: reading and setting the flags of an open descriptor.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

/// The environment as `envp` wants it. Inherited pairs are recognised by address (they are
/// borrowed from `inherited`, in order), so their prebuilt C strings are used; the call's own
/// are converted and kept in `owned`.
fn envp(image: &Image<'_>, owned: &mut Vec<CString>) -> Result<Vec<*const c_char>, Errno> {
    let (pairs, entries) = image.inherited;
    let same = |a: &OsStr, b: &OsStr| std::ptr::eq(a.as_bytes(), b.as_bytes());
    let mut pointers = Vec::with_capacity(image.env.len() + 1);
    let mut next = 0;
    for (name, value) in image.env {
        let found = pairs[next..]
            .iter()
            .position(|(n, v)| same(n, name) && same(v, value))
            .map(|at| next + at)
            .filter(|at| !entries.0[*at].is_empty());
        match found {
            Some(at) => {
                pointers.push(entries.0[at].as_ptr());
                next = at + 1;
            }
            None => {
                let entry = entry(name, value).ok_or(Errno::EINVAL)?;
                pointers.push(entry.as_ptr());
                owned.push(entry);
            }
        }
    }
    pointers.push(std::ptr::null());
    Ok(pointers)
}

/// RAII for the two `posix_spawn` attribute objects.
struct Attributes {
    attr: libc::posix_spawnattr_t,
    actions: libc::posix_spawn_file_actions_t,
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: both were initialised by `Attributes::new`.
        unsafe {
            libc::posix_spawnattr_destroy(&mut self.attr);
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
        }
    }
}

fn check(rc: libc::c_int) -> Result<(), Errno> {
    if rc == 0 { Ok(()) } else { Err(Errno::from_raw(rc)) }
}

impl Attributes {
    fn new() -> Result<Box<Self>, Errno> {
        // SAFETY: all-zero values are placeholders that the init calls overwrite.
        let mut this: Box<Self> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: initialising the objects in place.
        unsafe {
            check(libc::posix_spawnattr_init(&mut this.attr))?;
            if let Err(e) = check(libc::posix_spawn_file_actions_init(&mut this.actions)) {
                libc::posix_spawnattr_destroy(&mut this.attr);
                // Only the attributes were initialised: do not destroy the actions in Drop.
                std::mem::forget(this);
                return Err(e);
            }
        }
        Ok(this)
    }
}

/// Starts `image` with `posix_spawn`. The error is `posix_spawn`'s: an `exec` or `chdir`
/// failure in the child, or a resource the start needed.
pub(crate) fn spawn(image: &Image<'_>, dev_null: RawFd) -> Result<Direct, Errno> {
    let path = c_string(image.executable.as_os_str().as_bytes())?;
    let args: Vec<CString> = image.argv.iter().map(|a| c_string(a.as_bytes())).collect::<Result<_, _>>()?;
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut owned = Vec::new();
    let envp = envp(image, &mut owned)?;
    let cwd = image.cwd.map(|dir| c_string(dir.as_os_str().as_bytes())).transpose()?;

    let [(stdout_read, stdout_write), (stderr_read, stderr_write)] = output_pipes()?;
    let stdin = if image.stdin_piped { Some(pipe(0)?) } else { None };
    let stdin_source = stdin.as_ref().map_or(dev_null, |(read, _)| read.as_raw_fd());

    let mut spawn = Attributes::new()?;
    let Attributes { attr, actions } = &mut *spawn;
    // SAFETY: plain calls on initialised objects with valid arguments; the sigsets live on
    // the stack until `posix_spawn` returns.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        // Every signal at its default action: a signal the harness ignores (SIGPIPE here, or
        // SIGINT and SIGHUP when a host started it in the background or under `nohup`) would
        // stay ignored across `exec`, and a program could neither be interrupted nor trap it.
        let mut default: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut default);
        check(libc::posix_spawnattr_setpgroup(attr, 0))?;
        check(libc::posix_spawnattr_setsigmask(attr, &empty))?;
        check(libc::posix_spawnattr_setsigdefault(attr, &default))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        check(libc::posix_spawnattr_setflags(attr, flags as libc::c_short))?;
        // `dup2` onto 0, 1 and 2 clears close-on-exec there; the sources stay close-on-exec.
        // They are all above 2: the standard library keeps 0, 1 and 2 open in every Rust
        // program, so no new descriptor takes one of those numbers.
        check(libc::posix_spawn_file_actions_adddup2(actions, stdin_source, 0))?;
        check(libc::posix_spawn_file_actions_adddup2(actions, stdout_write.as_raw_fd(), 1))?;
        check(libc::posix_spawn_file_actions_adddup2(actions, stderr_write.as_raw_fd(), 2))?;
        if let Some(dir) = &cwd {
            check(libc::posix_spawn_file_actions_addchdir_np(actions, dir.as_ptr()))?;
        }
        // Every descriptor from 3 closed in the child, after the `dup2`s: one the harness
        // opened without close-on-exec (C code in another thread, say) never reaches the
        // program, however late it was opened.
        #[cfg(target_env = "gnu")]
        check(libc::posix_spawn_file_actions_addclosefrom_np(actions, 3))?;
        let mut pid: libc::pid_t = 0;
        check(libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            actions,
            attr,
            argv.as_ptr().cast::<*mut c_char>(),
            envp.as_ptr().cast::<*mut c_char>(),
        ))?;
        drop((stdout_write, stderr_write));
        let stdin = stdin.map(|(_read, write)| write);
        Ok(Direct { pid, stdin, stdout: stdout_read, stderr: stderr_read })
    }
}
