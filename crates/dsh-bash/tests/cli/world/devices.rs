//! The command has no terminal of the host and sees only a small private `/dev`.

use std::os::unix::process::CommandExt;
use std::process::Stdio;

use super::cell::{Mode, Outcome, World};
use super::host::{self, Pty, Removed, q};
use super::matrix::{Skip, over_matrix};

/// What may appear in the command's `/dev`: the usual private set, nothing of the host's.
const PRIVATE_DEV: [&str; 15] = [
    "core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout",
    "tty", "urandom", "zero",
];

/// Opens `/dev/tty` (read-write, else read-only: TIOCSTI needs no write access), and when
/// that works injects `touch <escaped>` with TIOCSTI; reports the process's `tty_nr` and which
/// of its standard streams are terminals.
fn tiocsti_script(escaped: &str) -> String {
    format!(
        r#"python3 - {line} <<'PY'
import fcntl, os, sys, termios
fd, error = None, None
for flags in (os.O_RDWR, os.O_RDONLY):
    try:
        fd = os.open("/dev/tty", flags)
        break
    except OSError as e:
        error = e.strerror
if fd is None:
    print("open /dev/tty:", error)
else:
    print("open /dev/tty: opened")
    try:
        for c in sys.argv[1] + "\n":
            fcntl.ioctl(fd, termios.TIOCSTI, c.encode())
        print("TIOCSTI: injected")
    except OSError as e:
        print("TIOCSTI:", e.strerror)
stat = open("/proc/self/stat").read()
print("tty_nr:", stat.rsplit(")", 1)[1].split()[4])
print("isatty:", [os.isatty(fd) for fd in (0, 1, 2)])
PY"#,
        line = q(format!("touch {escaped}"))
    )
}

/// Runs `command` through `dsh-bash` whose stdin is `pty` and whose controlling terminal it is.
fn call_on_terminal(world: &World, pty: &Pty, mode: Mode, command: &str) -> Outcome {
    let mut dsh = world.dsh(&world.call_args(mode, None, command));
    on_terminal(&mut dsh, pty);
    Outcome::parse(&dsh.output().expect("spawn dsh-bash on a terminal"))
}

/// Makes `pty` the stdin and the controlling terminal of what `command` starts.
fn on_terminal(dsh: &mut std::process::Command, pty: &Pty) {
    dsh.stdin(Stdio::from(pty.slave.try_clone().expect("dup pty")));
    // SAFETY: between fork and exec the child only calls setsid and ioctl, both
    // async-signal-safe; fd 0 is the terminal's slave side set just above.
    unsafe {
        dsh.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn attack_controlling_terminal(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    let escaped = world.outside.join("ESCAPED");
    let script = tiocsti_script(&escaped.display().to_string());
    let pty = Pty::open();
    // Control: run directly on the terminal (not through dsh-bash), the same script reaches it.
    let mut direct = std::process::Command::new("bash");
    direct.args(["-c", &script]);
    on_terminal(&mut direct, &pty);
    let control = direct.output().expect("run the script on the terminal");
    let control = String::from_utf8_lossy(&control.stdout);
    assert!(
        control.starts_with("open /dev/tty: opened\n") && !control.contains("tty_nr: 0\n"),
        "test setup: on its controlling terminal, the script should reach it: {control}"
    );
    let _ = pty.pending_input();
    // Every command dsh-bash runs, confined or not, starts a session of its own.
    for mode in [Mode::DangerFullAccess, Mode::WorkspaceWrite] {
        let outcome = call_on_terminal(world, &pty, mode, &script);
        assert_eq!(
            outcome.ok(),
            "open /dev/tty: No such device or address\ntty_nr: 0\nisatty: [False, False, False]\n",
            "a command under {} must have no controlling terminal: {outcome:#?}",
            mode.name()
        );
    }
    let injected = pty.pending_input();
    assert!(
        injected.is_empty(),
        "input was injected into dsh-bash's terminal: {:?}",
        String::from_utf8_lossy(&injected)
    );
    assert!(!escaped.exists(), "{} was created", escaped.display());
    Ok(())
}

#[test]
fn world_has_no_controlling_terminal_and_tiocsti_cannot_type_into_the_host() {
    over_matrix(
        "world_has_no_controlling_terminal_and_tiocsti_cannot_type_into_the_host",
        attack_controlling_terminal,
    );
}

fn attack_host_dev(world: &World) -> Result<(), Skip> {
    let pty = Pty::open();
    let host_shm = Removed(std::path::PathBuf::from(format!("/dev/shm/{}", host::unique("dsh-test"))));
    std::fs::write(&host_shm.0, "host").expect("write the host /dev/shm file");
    let inside_name = host::unique("dsh-inside");
    let leaked = Removed(std::path::PathBuf::from(format!("/dev/shm/{inside_name}")));
    let script = format!(
        "echo \"dev: $(ls -A /dev | tr '\\n' ' ')\"
echo \"pts: $(ls -A /dev/pts | tr '\\n' ' ')\"
for d in kvm kmsg mem; do [ -e /dev/$d ] && echo \"/dev/$d: present\" || echo \"/dev/$d: absent\"; done
echo \"shm: $(ls -A /dev/shm | tr '\\n' ' ')\"
touch /dev/shm/{inside} && echo 'shm writable: yes' || echo 'shm writable: no'",
        inside = q(&inside_name)
    );
    let out = world.bash(&script);
    let report = out.ok();
    let listed = |key: &str| -> Vec<String> {
        let line = report
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} line: {out:#?}"));
        line.split_whitespace().map(str::to_owned).collect()
    };
    let mut problems = Vec::new();
    let extra: Vec<String> =
        listed("dev: ").into_iter().filter(|e| !PRIVATE_DEV.contains(&e.as_str())).collect();
    if !extra.is_empty() {
        problems.push(format!("/dev shows host entries {extra:?}"));
    }
    let terminals: Vec<String> = listed("pts: ").into_iter().filter(|e| e != "ptmx").collect();
    if !terminals.is_empty() {
        problems.push(format!("/dev/pts lists terminals {terminals:?} (the test's own is {})", pty.number));
    }
    for device in ["kvm", "kmsg", "mem"] {
        if !report.contains(&format!("/dev/{device}: absent\n")) {
            problems.push(format!("/dev/{device} is present"));
        }
    }
    let shm = listed("shm: ");
    if !shm.is_empty() {
        problems.push(format!(
            "/dev/shm is not private: it lists {shm:?} (the host's has {})",
            host_shm.0.display()
        ));
    }
    if !report.contains("shm writable: yes\n") {
        problems.push("/dev/shm is not writable".into());
    }
    if leaked.0.exists() {
        problems.push(format!(
            "a file written to /dev/shm inside appeared in the host's as {}",
            leaked.0.display()
        ));
    }
    assert!(problems.is_empty(), "{}\n{out:#?}", problems.join("; "));
    Ok(())
}

#[test]
fn world_has_a_private_dev_without_host_devices_or_terminals() {
    over_matrix("world_has_a_private_dev_without_host_devices_or_terminals", attack_host_dev);
}
