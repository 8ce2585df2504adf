//! The command holds no capability (even when `dsh-bash` runs as root) and the kernel
//! interfaces a sandbox cannot govern are refused.

use std::process::Command;

use super::cell::World;
use super::host::verdicts;
use super::matrix::{Skip, over_matrix};

const ZERO_CAPABILITIES: &str = "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n";

/// The address the command tries to add to the loopback: one host (/32) of TEST-NET-2, so a
/// leak routes nothing else to `lo` while it lasts (a /8 would swallow a whole private range).
const TEST_ADDRESS: &str = "198.51.100.77/32";

/// Whether the host's loopback carries [`TEST_ADDRESS`] (read unconfined, by the test itself).
fn host_has_test_address() -> bool {
    let out = Command::new("ip").args(["-o", "addr", "show", "dev", "lo"]).output().expect("ip addr show");
    String::from_utf8_lossy(&out.stdout).contains(&format!(" {TEST_ADDRESS} "))
}

fn attack_capabilities(world: &World) -> Result<(), Skip> {
    for tool in ["ip", "mount", "dmesg"] {
        world.require(tool)?;
    }
    let had_address = host_has_test_address();
    let out = world.bash(&format!(
        "grep -E '^(Cap(Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status
ip addr add {TEST_ADDRESS} dev lo 2>/dev/null && echo 'ip addr add: DONE' || echo 'ip addr add: refused'
mount -o remount,rw / 2>/dev/null && echo 'remount: DONE' || echo 'remount: refused'
dmesg >/dev/null 2>&1 && echo 'dmesg: DONE' || echo 'dmesg: refused'"
    ));
    let leaked = !had_address && host_has_test_address();
    if leaked {
        let _ = Command::new("ip").args(["addr", "del", TEST_ADDRESS, "dev", "lo"]).status();
    }
    assert!(!leaked, "the command added {TEST_ADDRESS} to the host's loopback (removed again): {out:#?}");
    // Every set is empty under both runners, the bounding set too (bubblewrap as root
    // included: the harness empties it before bubblewrap runs).
    let capabilities = ZERO_CAPABILITIES;
    assert_eq!(
        out.ok(),
        format!("{capabilities}NoNewPrivs:\t1\nip addr add: refused\nremount: refused\ndmesg: refused\n"),
        "the command must hold no capability: {out:#?}"
    );
    Ok(())
}

#[test]
fn world_holds_no_capabilities_even_under_a_root_harness() {
    over_matrix("world_holds_no_capabilities_even_under_a_root_harness", attack_capabilities);
}

/// `(io_uring_setup, userfaultfd)` syscall numbers of this architecture.
fn syscall_numbers() -> Option<(u32, u32)> {
    if cfg!(target_arch = "x86_64") {
        Some((425, 323))
    } else if cfg!(target_arch = "aarch64") {
        Some((425, 282))
    } else {
        None
    }
}

fn attack_refused_syscalls(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    let Some((io_uring_setup, userfaultfd)) = syscall_numbers() else {
        return Err(Skip(format!("no syscall numbers for {}", std::env::consts::ARCH)));
    };
    let out = world.bash(&format!(
        r#"python3 - <<'PY'
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, number, *args):
    ctypes.set_errno(0)
    fd = libc.syscall(number, *args)
    if fd >= 0:
        os.close(fd)
        print(f"{{name}}: ALLOWED")
    else:
        print(f"{{name}}: {{errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())}}")
params = ctypes.create_string_buffer(120)
attempt("io_uring_setup", {io_uring_setup}, 1, params)
attempt("userfaultfd", {userfaultfd}, 0)
attempt("userfaultfd(UFFD_USER_MODE_ONLY)", {userfaultfd}, 1)
PY"#
    ));
    let expected: Vec<(String, String)> =
        ["io_uring_setup", "userfaultfd", "userfaultfd(UFFD_USER_MODE_ONLY)"]
            .iter()
            .map(|name| ((*name).to_owned(), "EPERM".to_owned()))
            .collect();
    assert_eq!(verdicts(out.ok()), expected, "io_uring and userfaultfd must be refused with EPERM: {out:#?}");
    Ok(())
}

#[test]
fn world_refuses_io_uring_and_userfaultfd() {
    over_matrix("world_refuses_io_uring_and_userfaultfd", attack_refused_syscalls);
}
