//! The seccomp filter on the real kernel. Each check forks; the child sets `no_new_privs`,
//! installs the filter and tries a syscall, and reports the errno through its exit code, so
//! the test process itself stays unfiltered.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use dsh_sandbox_local::seccomp::filter;
use dsh_test_support::sandbox::skip_runner;

/// How a forked child ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Exited(i32),
    Killed(i32),
}

/// Exit codes of a child that could not even get to its probe.
const NO_NEW_PRIVS_FAILED: i32 = 250;
const APPLY_FAILED: i32 = 251;
const DROP_TO_NOBODY_FAILED: i32 = 252;

const NOBODY: libc::c_long = 65534;

/// `SOCK_PACKET` (obsolete, deprecated in `libc`): the kernel maps `(AF_INET, SOCK_PACKET)`
/// to `AF_PACKET`.
const SOCK_PACKET: libc::c_int = 10;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// 0 for success, else the errno: what a probe reports.
fn outcome(ret: libc::c_long) -> i32 {
    if ret < 0 { errno() } else { 0 }
}

/// Runs `body` in a forked child and returns how the child ended; `body`'s result is the
/// child's exit code. `body` must be async-signal-safe: the test process has other threads.
fn in_child(body: impl FnOnce() -> i32) -> End {
    // SAFETY: the child runs only `body` (async-signal-safe by contract) and then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = body();
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for the child forked above.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == pid {
            break;
        }
        assert_eq!(errno(), libc::EINTR, "waitpid");
    }
    if libc::WIFSIGNALED(status) {
        End::Killed(libc::WTERMSIG(status))
    } else {
        End::Exited(libc::WEXITSTATUS(status))
    }
}

fn set_no_new_privs() -> bool {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 }
}

/// Runs `probe` in a forked child under the filter, the way the runners install it:
/// `no_new_privs` first, the filter last.
fn under_filter(probe: impl FnOnce() -> i32) -> End {
    let filter = filter().expect("the filter builds on x86_64 and aarch64");
    in_child(|| {
        if !set_no_new_privs() {
            return NO_NEW_PRIVS_FAILED;
        }
        if filter.apply().is_err() {
            return APPLY_FAILED;
        }
        probe()
    })
}

/// Raw syscalls with integer arguments only.
fn syscall6(nr: libc::c_long, args: [libc::c_long; 6]) -> libc::c_long {
    // SAFETY: callers pass integers or pointers to live buffers the kernel may fill.
    unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]) }
}

fn socket(domain: libc::c_int, ty: libc::c_int, protocol: libc::c_int) -> i32 {
    // SAFETY: socket with integer arguments only; the child exits without using the fd.
    outcome(unsafe { libc::socket(domain, ty, protocol) }.into())
}

fn socketpair(domain: libc::c_int, ty: libc::c_int) -> i32 {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    outcome(unsafe { libc::socketpair(domain, ty, 0, fds.as_mut_ptr()) }.into())
}

#[test]
fn io_uring_setup_is_refused_with_eperm() {
    let mut params = [0u8; 120]; // struct io_uring_params
    let end = under_filter(|| {
        outcome(syscall6(libc::SYS_io_uring_setup, [1, params.as_mut_ptr() as libc::c_long, 0, 0, 0, 0]))
    });
    assert_eq!(end, End::Exited(libc::EPERM));
}

#[test]
fn userfaultfd_is_refused_with_eperm() {
    let end =
        under_filter(|| outcome(syscall6(libc::SYS_userfaultfd, [libc::O_CLOEXEC.into(), 0, 0, 0, 0, 0])));
    assert_eq!(end, End::Exited(libc::EPERM));
}

#[test]
fn ptrace_traceme_is_refused_with_eperm() {
    let end =
        under_filter(|| outcome(syscall6(libc::SYS_ptrace, [libc::PTRACE_TRACEME.into(), 0, 0, 0, 0, 0])));
    assert_eq!(end, End::Exited(libc::EPERM));
}

#[test]
fn keyctl_on_the_session_keyring_is_refused_with_eperm() {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    let end = under_filter(|| {
        outcome(syscall6(libc::SYS_keyctl, [KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0, 0, 0, 0]))
    });
    assert_eq!(end, End::Exited(libc::EPERM));
}

#[test]
fn perf_event_open_is_refused_with_eperm() {
    let mut attr = [0u8; 128]; // struct perf_event_attr: a software clock event on this thread
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes()); // size
    let end = under_filter(|| {
        outcome(syscall6(libc::SYS_perf_event_open, [attr.as_mut_ptr() as libc::c_long, 0, -1, -1, 0, 0]))
    });
    assert_eq!(end, End::Exited(libc::EPERM));
}

/// Every syscall the module doc lists, called with zero arguments: each must be refused
/// before the kernel looks at them.
#[test]
fn every_listed_syscall_is_refused_with_eperm() {
    let listed: &[(&str, libc::c_long)] = &[
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("pidfd_getfd", libc::SYS_pidfd_getfd),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("bpf", libc::SYS_bpf),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("acct", libc::SYS_acct),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("reboot", libc::SYS_reboot),
        ("settimeofday", libc::SYS_settimeofday),
        ("clock_settime", libc::SYS_clock_settime),
    ];
    for (name, nr) in listed {
        let end = under_filter(|| outcome(syscall6(*nr, [0; 6])));
        assert_eq!(end, End::Exited(libc::EPERM), "{name}");
    }
}

/// A fresh file in a directory of its own, as a NUL-terminated path (removed with the dir).
fn scratch_file(dir: &tempfile::TempDir, name: &str) -> std::ffi::CString {
    let path = dir.path().join(name);
    std::fs::write(&path, b"").expect("write scratch file");
    std::ffi::CString::new(path.into_os_string().into_encoded_bytes()).expect("no NUL")
}

#[test]
fn setuid_and_setgid_modes_are_refused_with_eperm_and_other_modes_are_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = scratch_file(&dir, "f");
    let new =
        std::ffi::CString::new(dir.path().join("new").into_os_string().into_encoded_bytes()).expect("path");
    let at = libc::AT_FDCWD as libc::c_long;
    let path = file.as_ptr() as libc::c_long;
    let created = new.as_ptr() as libc::c_long;
    let creat = (libc::O_CREAT | libc::O_WRONLY) as libc::c_long;
    let tmpfile = (libc::O_TMPFILE | libc::O_WRONLY) as libc::c_long;
    let dir_path = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).expect("path");
    let cases: &[(&str, libc::c_long, [libc::c_long; 6], i32)] = &[
        ("fchmodat 04755", libc::SYS_fchmodat, [at, path, 0o4755, 0, 0, 0], libc::EPERM),
        ("fchmodat 02755", libc::SYS_fchmodat, [at, path, 0o2755, 0, 0, 0], libc::EPERM),
        ("fchmodat 0755", libc::SYS_fchmodat, [at, path, 0o755, 0, 0, 0], 0),
        ("fchmodat 01777", libc::SYS_fchmodat, [at, path, 0o1777, 0, 0, 0], 0),
        ("fchmodat2 04755", 452, [at, path, 0o4755, 0, 0, 0], libc::EPERM),
        ("fchmod 06755", libc::SYS_fchmod, [0, 0o6755, 0, 0, 0, 0], libc::EPERM),
        ("openat O_CREAT 04755", libc::SYS_openat, [at, created, creat, 0o4755, 0, 0], libc::EPERM),
        ("openat O_CREAT 0644", libc::SYS_openat, [at, created, creat, 0o644, 0, 0], 0),
        (
            "openat O_RDONLY with a stray mode",
            libc::SYS_openat,
            [at, path, libc::O_RDONLY as libc::c_long, 0o4755, 0, 0],
            0,
        ),
        (
            "openat O_TMPFILE 02755",
            libc::SYS_openat,
            [at, dir_path.as_ptr() as libc::c_long, tmpfile, 0o2755, 0, 0],
            libc::EPERM,
        ),
        (
            "mknodat S_IFREG|04755",
            libc::SYS_mknodat,
            [at, created, (libc::S_IFREG | 0o4755) as libc::c_long, 0, 0, 0],
            libc::EPERM,
        ),
        ("openat2", libc::SYS_openat2, [at, path, 0, 0, 0, 0], libc::ENOSYS),
    ];
    for (name, nr, args, expected) in cases {
        let end = under_filter(|| outcome(syscall6(*nr, *args)));
        assert_eq!(end, End::Exited(*expected), "{name}");
    }
    #[cfg(target_arch = "x86_64")]
    for (name, nr, args) in [
        ("chmod 04755", libc::SYS_chmod, [path, 0o4755, 0, 0, 0, 0]),
        ("creat 04755", libc::SYS_creat, [created, 0o4755, 0, 0, 0, 0]),
        ("open O_CREAT 02755", libc::SYS_open, [created, creat, 0o2755, 0, 0, 0]),
        (
            "mknod S_IFREG|02755",
            libc::SYS_mknod,
            [created, (libc::S_IFREG | 0o2755) as libc::c_long, 0, 0, 0, 0],
        ),
    ] {
        let end = under_filter(|| outcome(syscall6(nr, args)));
        assert_eq!(end, End::Exited(libc::EPERM), "{name}");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("f")).expect("stat").permissions().mode();
    assert_eq!(mode & 0o6000, 0, "no set-id bit came through: {mode:o}");
}

#[test]
fn vsock_sockets_are_refused_with_eafnosupport() {
    let end = under_filter(|| socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
    let end = under_filter(|| socket(libc::AF_VSOCK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
    let end = under_filter(|| socketpair(libc::AF_VSOCK, libc::SOCK_STREAM));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
}

#[test]
fn packet_sockets_are_refused_with_eafnosupport() {
    let all = i32::from(u16::to_be(libc::ETH_P_ALL as u16));
    let end = under_filter(|| socket(libc::AF_PACKET, libc::SOCK_RAW, all));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
    let end = under_filter(|| socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK, all));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
    let end = under_filter(|| socketpair(libc::AF_PACKET, libc::SOCK_RAW));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
}

#[test]
fn the_obsolete_inet_sock_packet_alias_is_refused_with_eafnosupport() {
    let all = i32::from(u16::to_be(libc::ETH_P_ALL as u16));
    let end = under_filter(|| socket(libc::AF_INET, SOCK_PACKET, all));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
    let end = under_filter(|| socket(libc::AF_INET, SOCK_PACKET | libc::SOCK_CLOEXEC, all));
    assert_eq!(end, End::Exited(libc::EAFNOSUPPORT));
}

#[test]
fn unix_inet_and_netlink_sockets_still_work() {
    assert_eq!(under_filter(|| socketpair(libc::AF_UNIX, libc::SOCK_STREAM)), End::Exited(0));
    assert_eq!(
        under_filter(|| socketpair(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC)),
        End::Exited(0)
    );
    assert_eq!(under_filter(|| socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0)), End::Exited(0));
    assert_eq!(under_filter(|| socket(libc::AF_INET, libc::SOCK_STREAM, 0)), End::Exited(0));
    assert_eq!(under_filter(|| socket(libc::AF_INET, libc::SOCK_DGRAM, 0)), End::Exited(0));
    assert_eq!(
        under_filter(|| socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)),
        End::Exited(0)
    );
}

#[test]
fn a_program_execed_under_the_filter_runs() {
    let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
    let end = under_filter(|| {
        // SAFETY: NUL-terminated path and a null-terminated argv, built before the fork.
        unsafe { libc::execv(argv[0], argv.as_ptr()) };
        errno()
    });
    assert_eq!(end, End::Exited(0));
}

#[test]
fn a_shell_pipeline_runs_under_the_filter() {
    let script = c"echo confined | cat >/dev/null && exit 7";
    let argv = [c"/bin/sh".as_ptr(), c"-c".as_ptr(), script.as_ptr(), std::ptr::null()];
    let end = under_filter(|| {
        // SAFETY: as above.
        unsafe { libc::execv(argv[0], argv.as_ptr()) };
        errno()
    });
    assert_eq!(end, End::Exited(7));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_syscalls_kill_the_process() {
    const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
    let end = under_filter(|| outcome(syscall6(X32_SYSCALL_BIT | libc::SYS_getpid, [0; 6])));
    assert_eq!(end, End::Killed(libc::SIGSYS));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn i386_syscalls_through_int_0x80_kill_the_process() {
    fn getpid_i386() -> i32 {
        let ret: i32;
        // SAFETY: i386 getpid (20) takes no arguments; int 0x80 from 64-bit code may clobber
        // r8-r11, declared as such.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inlateout("eax") 20 => ret,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                options(nostack),
            );
        }
        ret
    }
    // Without the filter the compat entry answers (when the kernel has IA32 emulation).
    let unfiltered = in_child(|| i32::from(getpid_i386() > 0));
    if unfiltered != End::Exited(1) {
        eprintln!("SKIP: no i386 syscall entry on this kernel: {unfiltered:?}");
        return;
    }
    assert_eq!(under_filter(|| i32::from(getpid_i386() > 0)), End::Killed(libc::SIGSYS));
}

/// Drops a root child to nobody (all capabilities go with the uid); a non-root child is
/// already unprivileged.
fn drop_to_nobody() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return true;
    }
    // Raw syscalls: they change this thread only, which is the whole child.
    syscall6(libc::SYS_setgroups, [0; 6]) == 0
        && syscall6(libc::SYS_setresgid, [NOBODY, NOBODY, NOBODY, 0, 0, 0]) == 0
        && syscall6(libc::SYS_setresuid, [NOBODY, NOBODY, NOBODY, 0, 0, 0]) == 0
}

#[test]
fn an_unprivileged_process_with_no_new_privs_can_install_the_filter() {
    let filter = filter().unwrap();
    let end = in_child(|| {
        if !drop_to_nobody() {
            return DROP_TO_NOBODY_FAILED;
        }
        if !set_no_new_privs() {
            return NO_NEW_PRIVS_FAILED;
        }
        if filter.apply().is_err() {
            return APPLY_FAILED;
        }
        outcome(syscall6(libc::SYS_userfaultfd, [libc::O_CLOEXEC.into(), 0, 0, 0, 0, 0]))
    });
    assert_eq!(end, End::Exited(libc::EPERM));
}

#[test]
fn an_unprivileged_process_without_no_new_privs_gets_eacces_from_apply() {
    let filter = filter().unwrap();
    let end = in_child(|| {
        if !drop_to_nobody() {
            return DROP_TO_NOBODY_FAILED;
        }
        match filter.apply() {
            Ok(()) => 0,
            Err(errno) => errno,
        }
    });
    assert_eq!(end, End::Exited(libc::EACCES));
}

#[test]
fn bytes_are_the_instructions_in_memory_layout() {
    let filter = filter().unwrap();
    let bytes = filter.bytes();
    assert_eq!(bytes.len() % 8, 0);
    assert_eq!(bytes.len(), filter.instruction_count() * 8);
    let insn = |at: usize| {
        let raw = &bytes[at * 8..at * 8 + 8];
        (
            u16::from_ne_bytes([raw[0], raw[1]]),
            raw[2],
            raw[3],
            u32::from_ne_bytes(raw[4..8].try_into().unwrap()),
        )
    };
    // First `ld [arch]` (BPF_LD|BPF_W|BPF_ABS, offsetof(seccomp_data, arch)); the returns
    // (allow, the two errnos, kill) close the program, kill last.
    assert_eq!(insn(0), (0x20, 0, 0, 4));
    let last = filter.instruction_count() - 1;
    assert_eq!(insn(last), (0x06, 0, 0, libc::SECCOMP_RET_KILL_PROCESS));
    assert_eq!(insn(last - 3), (0x06, 0, 0, libc::SECCOMP_RET_ALLOW));
    // Short: installing it is paid for by every command (the mode checks of the chmod and
    // creating-open family take about twenty of these).
    assert!(filter.instruction_count() < 96, "{} instructions", filter.instruction_count());
}

#[test]
fn the_filter_is_built_once_per_process() {
    assert!(std::ptr::eq(filter().unwrap(), filter().unwrap()));
}

/// Set by `bubblewrap_installs_the_bytes_with_seccomp_fd` for the copy of this binary it
/// runs under bubblewrap.
const PROBE_ENV: &str = "DSH_SECCOMP_TEST_PROBE";

/// Not a check on its own: under `PROBE_ENV` it is the program bubblewrap runs, and exits with
/// the errno of `socket(AF_VSOCK)` (0 if it worked).
#[test]
fn probe_for_bubblewrap() {
    if std::env::var_os(PROBE_ENV).is_some() {
        std::process::exit(socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0));
    }
}

#[test]
fn bubblewrap_installs_the_bytes_with_seccomp_fd() {
    let Some(bwrap) = ["/usr/bin/bwrap", "/bin/bwrap"].into_iter().find(|p| std::path::Path::new(p).exists())
    else {
        skip_runner("bwrap", "bubblewrap is not installed");
        return;
    };
    let mut program = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut program, filter().unwrap().bytes()).unwrap();
    std::io::Seek::rewind(&mut program).unwrap();
    let fd = program.as_raw_fd();
    let run = |seccomp: bool| {
        let mut cmd = Command::new(bwrap);
        cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
        if seccomp {
            cmd.args(["--seccomp", "3"]);
        }
        cmd.arg("--").arg(std::env::current_exe().unwrap());
        cmd.args(["--exact", "probe_for_bubblewrap", "--test-threads=1", "-q"]).env(PROBE_ENV, "1");
        // SAFETY: dup2 and fcntl are async-signal-safe. They leave the program (rewound; the
        // parent does not read it) at fd 3 without FD_CLOEXEC; dup2 onto itself would keep
        // the flag, hence the fcntl.
        unsafe {
            cmd.pre_exec(move || {
                let ret = if fd == 3 { libc::fcntl(3, libc::F_SETFD, 0) } else { libc::dup2(fd, 3) };
                if ret < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
            });
        }
        cmd.output().unwrap()
    };
    let baseline = run(false);
    if !baseline.status.success() && baseline.status.code() != Some(libc::EAFNOSUPPORT) {
        skip_runner(
            "bwrap",
            &format!("bubblewrap cannot run here: {}", String::from_utf8_lossy(&baseline.stderr)),
        );
        return;
    }
    let filtered = run(true);
    assert_eq!(
        filtered.status.code(),
        Some(libc::EAFNOSUPPORT),
        "{}",
        String::from_utf8_lossy(&filtered.stderr)
    );
}
