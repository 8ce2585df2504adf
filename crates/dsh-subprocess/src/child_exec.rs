//! What a forked child is about to `exec`, published to pre-exec code that must do the
//! `exec` itself.
//!
//! The standard library runs pre-exec hooks in the forked child and then `exec`s the program
//! itself, with the arguments and environment it prepared. A hook that must start the program
//! from another process — a confinement that forks the command into a PID namespace with
//! `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own, instead of copying the whole
//! address space again — needs the same program, arguments and environment, as C strings
//! made before `fork` (nothing may be allocated after it). The spawner builds a
//! [`ChildExec`] and [publishes](ChildExec::publish) it on the forking thread around the
//! `fork`; in the child, [`current`] finds it. Nothing here knows what a sandbox is.

use std::cell::Cell;
use std::ffi::{CStr, CString, OsStr, c_char};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

thread_local! {
    static CURRENT: Cell<*const ChildExec> = const { Cell::new(std::ptr::null()) };
}

/// A program, its arguments and its environment as `execve(2)` takes them.
#[derive(Debug)]
pub struct ChildExec {
    path: CString,
    _argv: Vec<CString>,
    argv: Vec<*const c_char>,
    _env: Vec<CString>,
    envp: Vec<*const c_char>,
    /// Where a hook that starts the program in a sibling process reports that process's pid.
    report: Option<std::os::fd::RawFd>,
    /// The child shares this process's memory (see [`ChildExec::sharing_memory`]).
    shared: bool,
    /// The sibling's pid, reported in memory by a child that shares it (0: none).
    sibling: AtomicI32,
    /// The hook of a child that shares this process's memory asked for a forked start.
    fork_wanted: AtomicBool,
}

impl ChildExec {
    /// The image of `path` run with `argv` (`argv[0]` included) and exactly `env`; `None`
    /// when a string holds a NUL byte (such a spawn fails before `fork` anyway).
    pub fn new<'a>(
        path: &Path,
        argv: impl IntoIterator<Item = &'a OsStr>,
        env: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
    ) -> Option<Self> {
        let path = CString::new(path.as_os_str().as_bytes()).ok()?;
        let args: Vec<CString> =
            argv.into_iter().map(|a| CString::new(a.as_bytes()).ok()).collect::<Option<_>>()?;
        let vars: Vec<CString> = env
            .into_iter()
            .map(|(name, value)| {
                let mut entry = name.as_bytes().to_vec();
                entry.push(b'=');
                entry.extend_from_slice(value.as_bytes());
                CString::new(entry).ok()
            })
            .collect::<Option<_>>()?;
        let pointers = |strings: &[CString]| {
            strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
        };
        Some(Self {
            path,
            argv: pointers(&args),
            _argv: args,
            envp: pointers(&vars),
            _env: vars,
            report: None,
            shared: false,
            sibling: AtomicI32::new(0),
            fork_wanted: AtomicBool::new(false),
        })
    }

    /// The program's path.
    pub fn path(&self) -> &CStr {
        &self.path
    }

    /// The NULL-terminated argument vector.
    pub fn argv(&self) -> *const *const c_char {
        self.argv.as_ptr()
    }

    /// The NULL-terminated environment.
    pub fn envp(&self) -> *const *const c_char {
        self.envp.as_ptr()
    }

    /// Offers a pipe's write end on which a hook may [report](Self::report_sibling) that it
    /// started the program in a sibling of the forked child (`clone(CLONE_PARENT)`), so the
    /// spawner waits for that process instead of the child, which then exits at once.
    pub fn with_report(mut self, fd: std::os::fd::RawFd) -> Self {
        self.report = Some(fd);
        self
    }

    /// For a child that shares this process's memory until it `exec`s or exits
    /// (`clone(CLONE_VM | CLONE_VFORK)`): a sibling is reported in memory, which the spawner
    /// reads once the child is done with it ([`Self::sibling`]), and the hook may ask for a
    /// forked start instead ([`Self::want_fork`]).
    pub fn sharing_memory(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Whether the child shares the spawner's memory (see [`Self::sharing_memory`]): its
    /// hook then must not change what belongs to the address space (such as whether it is
    /// dumpable) nor `fork` it.
    pub fn shares_memory(&self) -> bool {
        self.shared
    }

    /// In a child that shares the spawner's memory: asks for the spawn to be made again with a
    /// `fork` (the hook cannot do its work without changing the address space). The hook then
    /// fails; the spawner starts the child anew. Async-signal-safe (one atomic store).
    pub fn want_fork(&self) {
        self.fork_wanted.store(true, Ordering::SeqCst);
    }

    /// Whether the hook asked for a forked start ([`Self::want_fork`]).
    pub fn fork_wanted(&self) -> bool {
        self.fork_wanted.load(Ordering::SeqCst)
    }

    /// The sibling a child that shares the spawner's memory reported, once it is done.
    pub fn sibling(&self) -> Option<libc::pid_t> {
        Some(self.sibling.load(Ordering::SeqCst)).filter(|pid| *pid > 0)
    }

    /// Whether the spawner takes a sibling's pid (see [`Self::with_report`]).
    pub fn takes_sibling(&self) -> bool {
        self.report.is_some() || self.shared
    }

    /// In the forked child: reports `pid`, a sibling that runs the program. Async-signal-safe
    /// (one `write` of four bytes, or one atomic store in a child that shares the spawner's
    /// memory). Returns whether the report was made.
    pub fn report_sibling(&self, pid: libc::pid_t) -> bool {
        if self.shared {
            self.sibling.store(pid, Ordering::SeqCst);
            return true;
        }
        let Some(fd) = self.report else { return false };
        let bytes = pid.to_ne_bytes();
        // SAFETY: writing a stack buffer to the pipe the spawner made for this.
        unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) == bytes.len() as isize }
    }

    /// Makes `self` the image [`current`] returns in children forked by this thread while
    /// the guard lives.
    pub fn publish(&self) -> Published<'_> {
        CURRENT.with(|c| c.set(self));
        Published(std::marker::PhantomData)
    }
}

/// Keeps a [`ChildExec`] published; unpublishes it when dropped.
#[derive(Debug)]
pub struct Published<'a>(std::marker::PhantomData<&'a ChildExec>);

impl Drop for Published<'_> {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(std::ptr::null()));
    }
}

/// In a child forked while an image was published: that image. Async-signal-safe (one read
/// of a constant-initialised thread-local).
///
/// # Safety
///
/// Call only in a forked child before it `exec`s or exits (the parent's guard, and so the
/// image, is alive in the child's copy of memory), or in the parent while the guard lives.
pub unsafe fn current() -> Option<&'static ChildExec> {
    let pointer = CURRENT.with(Cell::get);
    // SAFETY: per the caller's promise the published value outlives every use of the result.
    unsafe { pointer.as_ref() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_published_only_while_its_guard_lives() {
        let image = ChildExec::new(
            Path::new("/bin/echo"),
            [OsStr::new("echo"), OsStr::new("hi")],
            [(OsStr::new("A"), OsStr::new("1"))],
        )
        .expect("no NUL bytes");
        // SAFETY: nothing is published yet.
        assert!(unsafe { current() }.is_none());
        let guard = image.publish();
        // SAFETY: the guard is alive.
        let seen = unsafe { current() }.expect("published");
        assert_eq!(seen.path(), c"/bin/echo");
        // SAFETY: reading the vectors built above, each NULL-terminated.
        unsafe {
            assert_eq!(CStr::from_ptr(*seen.argv().add(1)), c"hi");
            assert!((*seen.argv().add(2)).is_null());
            assert_eq!(CStr::from_ptr(*seen.envp()), c"A=1");
            assert!((*seen.envp().add(1)).is_null());
        }
        drop(guard);
        // SAFETY: nothing is published any more.
        assert!(unsafe { current() }.is_none());
        assert!(ChildExec::new(Path::new("/bin/a\0b"), [], []).is_none());
    }
}
