//! The seccomp-BPF filter both runners apply to every confined command, as the last step
//! before `exec` (after `no_new_privs`, Landlock and the mount namespace are in place).
//!
//! The filter allows everything by default and refuses a short list of kernel interfaces that
//! no shell session, build or test run needs, and that either reach outside the confinement
//! the other layers draw or are large kernel attack surface. It is a deny list, not an allow
//! list: it does not try to describe what bash, git, python, node, cargo, make or tmux do, so
//! `clone`, `unshare`, `mount`, `AF_UNIX`/`AF_INET`/`AF_INET6`/`AF_NETLINK` sockets and the
//! rest stay available (network policy is a separate concern).
//!
//! Refused with `EPERM`:
//!
//! * `io_uring_setup`, `io_uring_enter`, `io_uring_register`: a ring performs `openat`,
//!   `connect`, `sendmsg` and friends without the corresponding syscalls, so no syscall
//!   filter ever sees them, and LSM mediation of rings has had gaps (the hooks for their
//!   credential overrides and kernel polling threads only arrived in Linux 5.16). io_uring
//!   is also one of the most exploited kernel subsystems. (A ring fd inherited from the
//!   parent would still work: the filter stops new rings, not existing ones.)
//! * `userfaultfd`: stalls the kernel at a chosen page fault, which turns kernel race
//!   conditions into reliable exploits.
//! * `ptrace`, `process_vm_readv`, `process_vm_writev`, `pidfd_getfd`: read and write the
//!   memory of, or take file descriptors from, other processes of the same user, such as the
//!   harness itself. This also means debuggers and `strace` do not work inside the sandbox.
//! * `perf_event_open`: system-wide observation (other processes, kernel addresses) where
//!   `perf_event_paranoid` allows it, and a large attack surface everywhere.
//! * `bpf`: loads programs into the kernel; with privileges that is tracing of every
//!   process, and the verifier has been a steady source of kernel exploits.
//! * `keyctl`, `add_key`, `request_key`: keyrings are not confined by a mount namespace and
//!   the child inherits the harness's session keyring (and, outside a user namespace, its
//!   user keyring), so it could read the credentials kept there or plant its own.
//! * `kexec_load`, `kexec_file_load`, `init_module`, `finit_module`, `delete_module`:
//!   replace the running kernel or load code into it.
//! * `open_by_handle_at`: opens a file by filesystem handle without a path lookup, so the
//!   files a mount namespace hides are reachable again (the "shocker" container escape).
//! * `acct`, `swapon`, `swapoff`, `reboot`, `settimeofday`, `clock_settime`: host
//!   administration a root child could otherwise perform.
//!
//! Refused with `EPERM` when the mode they set carries `S_ISUID` or `S_ISGID`:
//!
//! * `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `mknod`, `mknodat`, `creat`, and `open` and
//!   `openat` when they create a file (`O_CREAT` or `O_TMPFILE`). A root command could
//!   otherwise leave a setuid-root copy of a shell in the workspace for any local user to
//!   run. The filter cannot tell a file from a directory, so `chmod g+s` on a directory is
//!   refused too (a directory created inside a setgid one still inherits the bit: the kernel
//!   sets it, not the mode argument). The other mode bits are untouched. A file capability
//!   (`security.capability`) needs `CAP_SETFCAP`, which no confined command holds.
//!
//! Refused with `ENOSYS`, as if the kernel predated it, so the C library falls back:
//!
//! * `openat2`: its flags and mode lie behind a pointer the filter cannot read.
//!
//! Refused with `EAFNOSUPPORT` (`socket` and `socketpair`), as if the family did not exist:
//!
//! * `AF_VSOCK`: talks to the hypervisor host and its agents, a channel outside any network
//!   policy.
//! * `AF_PACKET`, and the obsolete `(AF_INET, SOCK_PACKET)` alias the kernel maps to it: raw
//!   link-layer frames, to sniff and spoof traffic on the host's interfaces.
//!
//! The filter checks the architecture first: a syscall of another ABI (i386 through
//! `int 0x80` on x86_64, arm32 on aarch64) numbers its syscalls differently, so it kills the
//! process. On x86_64 it also kills any x32 syscall (number with bit 30 set): on kernels built
//! with `CONFIG_X86_X32_ABI` those reach the same handlers under other numbers, which would
//! bypass every rule above. Native-ABI syscalls never have that bit set.
//!
//! Every other syscall is allowed on its number alone, without loading an argument, so since
//! Linux 5.11 the kernel caches it as always-allowed and skips running the filter for it. The
//! mode setters above (`openat` among them) and the socket calls run the filter each time:
//! a few dozen BPF instructions, compiled to native code.
//!
//! The program is laid out by hand, as short as it can be (see `compile`), once per process
//! (in the parent: building allocates) and installed by [`SeccompFilter::apply`] in the forked child, or handed to
//! bubblewrap's `--seccomp FD` as [`SeccompFilter::bytes`]. Only x86_64 and aarch64 are
//! supported; elsewhere [`SeccompFilter::build`] fails and the caller decides whether that
//! fails closed.

use std::fmt;
use std::sync::OnceLock;

use libc::sock_filter;

/// Classic BPF opcodes (`linux/bpf_common.h`).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JA: u16 = 0x05; // BPF_JMP | BPF_JA
const BPF_JMP_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JMP_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_ALU_AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// Offsets into `struct seccomp_data` (the argument words are little-endian here).
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const SECCOMP_DATA_ARG0_LOW: u32 = 16;
const SECCOMP_DATA_ARG1_LOW: u32 = 24;
/// `linux/audit.h`: the architectures the filter knows.
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;

/// The native architectures the filter supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types, reason = "named as the architectures are")]
enum TargetArch {
    x86_64,
    aarch64,
}
/// `__X32_SYSCALL_BIT`: x32 syscalls are the native numbers with this bit set.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// The kernel's `BPF_MAXINSNS`.
const BPF_MAX_INSNS: usize = 4096;
/// `linux/net.h`: the type bits of `socket`'s type argument (the rest are flags), and the
/// obsolete type that turns an `AF_INET` socket into an `AF_PACKET` one.
const SOCK_TYPE_MASK: u64 = 0xf;
const SOCK_PACKET: u64 = 10;
/// `S_ISUID | S_ISGID`: the mode bits a confined command may never set on a file.
const SET_ID_BITS: u32 = 0o6000;
/// `O_CREAT | __O_TMPFILE` (the same on x86_64 and aarch64): the `open` flags under which
/// the mode argument is used.
const CREATING_FLAGS: u32 = 0o100 | 0o20_000_000;
/// `fchmodat2` (Linux 6.6), numbered alike on every architecture; not in every libc crate.
const SYS_FCHMODAT2: libc::c_long = 452;

/// The compiled filter, built once per process (x86_64 and aarch64 only).
pub struct SeccompFilter {
    program: Vec<libc::sock_filter>,
    /// `program.len()`, checked at build time to fit `sock_fprog::len`.
    len: u16,
    /// `program` in memory layout, for bubblewrap's `--seccomp FD`.
    bytes: Vec<u8>,
}

impl SeccompFilter {
    /// Compiles the filter for the architecture this binary runs on.
    pub fn build() -> Result<Self, String> {
        let arch = native_arch().ok_or_else(|| {
            format!("the seccomp filter supports x86_64 and aarch64, not {}", std::env::consts::ARCH)
        })?;
        let program = compile(arch).map_err(|e| format!("building the seccomp filter: {e}"))?;
        let len = u16::try_from(program.len())
            .ok()
            .filter(|&len| usize::from(len) <= BPF_MAX_INSNS)
            .ok_or_else(|| format!("the seccomp filter has {} instructions, over 4096", program.len()))?;
        let bytes = program
            .iter()
            .flat_map(|i| {
                let mut raw = [0u8; 8];
                raw[..2].copy_from_slice(&i.code.to_ne_bytes());
                raw[2] = i.jt;
                raw[3] = i.jf;
                raw[4..].copy_from_slice(&i.k.to_ne_bytes());
                raw
            })
            .collect();

        Ok(Self { program, len, bytes })
    }

    /// Installs the filter on the calling thread.
    ///
    /// Async-signal-safe — no allocation, no locks — so it can run between `fork` and `exec`.
    /// Requires `no_new_privs` already set (or `CAP_SYS_ADMIN`); otherwise the kernel refuses
    /// with `EACCES`. Returns the errno on failure.
    pub fn apply(&self) -> Result<(), i32> {
        let fprog = libc::sock_fprog { len: self.len, filter: self.program.as_ptr().cast_mut() };
        // SAFETY: `fprog` points at `self.len` initialised instructions that outlive the call;
        // the kernel only copies them (it never writes through the `*mut`).
        let ret = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0 as libc::c_uint,
                &fprog as *const libc::sock_fprog,
            )
        };
        if ret == 0 { Ok(()) } else { Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)) }
    }

    /// The raw program (the `sock_filter` array as bytes), as bubblewrap's `--seccomp FD`
    /// reads it.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How many BPF instructions the program has (`bytes().len() / 8`).
    pub fn instruction_count(&self) -> usize {
        self.program.len()
    }
}

impl fmt::Debug for SeccompFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeccompFilter").field("instructions", &self.program.len()).finish()
    }
}

/// The filter, built on first use and cached for the life of the process. Call it before
/// forking: the first call allocates.
pub fn filter() -> Result<&'static SeccompFilter, String> {
    static FILTER: OnceLock<Result<SeccompFilter, String>> = OnceLock::new();
    FILTER.get_or_init(SeccompFilter::build).as_ref().map_err(Clone::clone)
}

fn native_arch() -> Option<TargetArch> {
    if cfg!(target_arch = "x86_64") {
        Some(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(TargetArch::aarch64)
    } else {
        None
    }
}

/// Syscalls refused with `EPERM`; the module doc says why, group by group.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const REFUSED: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_userfaultfd,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_perf_event_open,
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const REFUSED: &[libc::c_long] = &[];

/// Where a syscall whose arguments the filter reads keeps them: the mode argument of a
/// call that sets a mode (`Mode(i)`), or the flags and then the mode of an `open` (`Open(i)`:
/// flags at `i`, mode at `i + 1`).
#[derive(Clone, Copy, PartialEq)]
enum ModeArg {
    Mode(u8),
    Open(u8),
}

/// The syscalls that set a file's mode, and where their mode is: refused with `EPERM` when it
/// carries `S_ISUID` or `S_ISGID` (for an `open`, only when it creates the file).
#[cfg(target_arch = "x86_64")]
const MODE_SETTERS: &[(libc::c_long, ModeArg)] = &[
    (libc::SYS_openat, ModeArg::Open(2)),
    (libc::SYS_open, ModeArg::Open(1)),
    (libc::SYS_creat, ModeArg::Mode(1)),
    (libc::SYS_chmod, ModeArg::Mode(1)),
    (libc::SYS_fchmod, ModeArg::Mode(1)),
    (libc::SYS_fchmodat, ModeArg::Mode(2)),
    (SYS_FCHMODAT2, ModeArg::Mode(2)),
    (libc::SYS_mknod, ModeArg::Mode(1)),
    (libc::SYS_mknodat, ModeArg::Mode(2)),
];
#[cfg(target_arch = "aarch64")]
const MODE_SETTERS: &[(libc::c_long, ModeArg)] = &[
    (libc::SYS_openat, ModeArg::Open(2)),
    (libc::SYS_fchmod, ModeArg::Mode(1)),
    (libc::SYS_fchmodat, ModeArg::Mode(2)),
    (SYS_FCHMODAT2, ModeArg::Mode(2)),
    (libc::SYS_mknodat, ModeArg::Mode(2)),
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const MODE_SETTERS: &[(libc::c_long, ModeArg)] = &[];

/// Syscalls refused with `ENOSYS`, so the C library falls back to one the filter can read:
/// `openat2` keeps its flags and mode behind a pointer.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const UNIMPLEMENTED: &[libc::c_long] = &[libc::SYS_openat2];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const UNIMPLEMENTED: &[libc::c_long] = &[];

/// Lays out the program by hand, as short as it can be: installing a filter costs time in
/// proportion to its length (the kernel translates and JIT-compiles it, and runs it once per
/// syscall number to find the always-allowed ones), and it is installed for every command.
///
/// ```text
///   ld arch;  jeq NATIVE ? next : kill
///   ld nr;    (x86_64) jge X32_BIT ? kill : next
///   jeq REFUSED[i] ? eperm : next            (one per refused syscall)
///   jeq UNIMPLEMENTED[i] ? enosys : next
///   jeq MODE_SETTERS[i] ? openN / modeN : next   (one per mode setter)
///   jeq socket ? sock : next;  jeq socketpair ? sock : allow
/// openN:  ld args[N];  and CREATING_FLAGS;  jeq 0 ? allow : modeN+1
/// modeN:  ld args[N];  ja check
/// check:  and S_ISUID|S_ISGID;  jeq 0 ? allow : eperm
/// sock:
///   ld args[0];  jeq AF_VSOCK ? eafno;  jeq AF_PACKET ? eafno;  jeq AF_INET ? next : allow
///   ld args[1];  and SOCK_TYPE_MASK;  jeq SOCK_PACKET ? eafno : allow
/// enosys, allow, eafno, eperm, kill: ret
/// ```
fn compile(arch: TargetArch) -> Result<Vec<sock_filter>, String> {
    let audit_arch = match arch {
        TargetArch::x86_64 => AUDIT_ARCH_X86_64,
        TargetArch::aarch64 => AUDIT_ARCH_AARCH64,
    };
    // The program is assembled with symbolic targets, resolved once the layout is known.
    #[derive(Clone, Copy, PartialEq)]
    enum To {
        Next,
        Sock,
        /// Reads the `open` flags at this argument.
        Open(u8),
        /// Loads the mode at this argument.
        Mode(u8),
        Check,
        Allow,
        Enosys,
        Eafno,
        Eperm,
        Kill,
    }
    enum Insn {
        Stmt(u16, u32),
        Jump(u16, u32, To, To),
        Goto(To),
        Label(To),
    }
    use Insn::{Goto, Jump, Label, Stmt};
    let arg_low = |i: u8| SECCOMP_DATA_ARG0_LOW + 8 * u32::from(i);
    let mut body = vec![
        Stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        Jump(BPF_JMP_JEQ_K, audit_arch, To::Next, To::Kill),
        Stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
    ];
    if arch == TargetArch::x86_64 {
        body.push(Jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, To::Kill, To::Next));
    }
    for &nr in REFUSED {
        body.push(Jump(BPF_JMP_JEQ_K, nr as u32, To::Eperm, To::Next));
    }
    for &nr in UNIMPLEMENTED {
        body.push(Jump(BPF_JMP_JEQ_K, nr as u32, To::Enosys, To::Next));
    }
    for &(nr, arg) in MODE_SETTERS {
        let to = match arg {
            ModeArg::Open(i) => To::Open(i),
            ModeArg::Mode(i) => To::Mode(i),
        };
        body.push(Jump(BPF_JMP_JEQ_K, nr as u32, to, To::Next));
    }
    body.extend([
        Jump(BPF_JMP_JEQ_K, libc::SYS_socket as u32, To::Sock, To::Next),
        Jump(BPF_JMP_JEQ_K, libc::SYS_socketpair as u32, To::Sock, To::Allow),
    ]);
    // The argument readers the mode setters jump to, each laid out once.
    let mut opens: Vec<u8> = Vec::new();
    let mut modes: Vec<u8> = Vec::new();
    for &(_, arg) in MODE_SETTERS {
        let (list, i, mode) = match arg {
            ModeArg::Open(i) => (&mut opens, i, i + 1),
            ModeArg::Mode(i) => (&mut modes, i, i),
        };
        if !list.contains(&i) {
            list.push(i);
        }
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    for &i in &opens {
        body.extend([
            Label(To::Open(i)),
            // `flags` is a C int and the mode a `umode_t`: the low 32 bits, as the kernel
            // reads them.
            Stmt(BPF_LD_W_ABS, arg_low(i)),
            Stmt(BPF_ALU_AND_K, CREATING_FLAGS),
            Jump(BPF_JMP_JEQ_K, 0, To::Allow, To::Mode(i + 1)),
        ]);
    }
    for &i in &modes {
        body.extend([Label(To::Mode(i)), Stmt(BPF_LD_W_ABS, arg_low(i)), Goto(To::Check)]);
    }
    if !modes.is_empty() {
        body.extend([
            Label(To::Check),
            Stmt(BPF_ALU_AND_K, SET_ID_BITS),
            Jump(BPF_JMP_JEQ_K, 0, To::Allow, To::Eperm),
        ]);
    }
    body.extend([
        Label(To::Sock),
        // `domain` and `type` are C ints: the low 32 bits, as the kernel reads them.
        Stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARG0_LOW),
        Jump(BPF_JMP_JEQ_K, libc::AF_VSOCK as u32, To::Eafno, To::Next),
        Jump(BPF_JMP_JEQ_K, libc::AF_PACKET as u32, To::Eafno, To::Next),
        Jump(BPF_JMP_JEQ_K, libc::AF_INET as u32, To::Next, To::Allow),
        Stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARG1_LOW),
        Stmt(BPF_ALU_AND_K, SOCK_TYPE_MASK as u32),
        Jump(BPF_JMP_JEQ_K, SOCK_PACKET as u32, To::Eafno, To::Allow),
        Label(To::Enosys),
        Stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        Label(To::Allow),
        Stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
        Label(To::Eafno),
        Stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32),
        Label(To::Eperm),
        Stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        Label(To::Kill),
        Stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
    ]);
    let mut labels = Vec::new();
    let mut at = 0usize;
    for insn in &body {
        match insn {
            Label(to) => labels.push((*to, at)),
            _ => at += 1,
        }
    }
    let offset = |to: To, next: usize| -> Result<usize, String> {
        let dest = if to == To::Next {
            next
        } else {
            labels.iter().find(|(l, _)| *l == to).map(|(_, at)| *at).ok_or("a jump to a missing label")?
        };
        dest.checked_sub(next).ok_or_else(|| "a jump backwards".to_owned())
    };
    let target = |to: To, next: usize| -> Result<u8, String> {
        u8::try_from(offset(to, next)?).map_err(|_| "a jump of over 255 instructions".to_owned())
    };
    let mut program = Vec::with_capacity(at);
    for insn in &body {
        match insn {
            Label(_) => {}
            Stmt(code, k) => program.push(stmt(*code, *k)),
            Goto(to) => {
                let next = program.len() + 1;
                let k = u32::try_from(offset(*to, next)?).map_err(|_| "a jump too far".to_owned())?;
                program.push(stmt(BPF_JMP_JA, k));
            }
            Jump(code, k, jt, jf) => {
                let next = program.len() + 1;
                program.push(jump(*code, *k, target(*jt, next)?, target(*jf, next)?));
            }
        }
    }
    Ok(program)
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}
