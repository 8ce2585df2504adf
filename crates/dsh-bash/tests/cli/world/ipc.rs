//! The host's Unix sockets (pathname and abstract), a host tmux server, and the socket
//! families that reach beyond the machine's processes are out of the command's reach.

use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cell::World;
use super::host::{self, q, verdicts, wait_until};
use super::matrix::{Skip, over_matrix};

/// A Unix-socket server of the host that anyone may connect to (mode 0777, directory 0755),
/// so only the sandbox can stop a connection.
struct HostListener {
    name: &'static str,
    /// The address as the client script spells it (`@name` for an abstract socket).
    address: String,
    listener: UnixListener,
}

impl HostListener {
    fn pathname(name: &'static str, dir: &Path) -> HostListener {
        let path = dir.join("sock");
        let listener = UnixListener::bind(&path).unwrap_or_else(|e| panic!("bind {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod socket");
        HostListener { name, address: path.display().to_string(), listener }
    }

    fn abstract_name(name: &'static str) -> HostListener {
        let label = host::unique("dsh-test");
        let address = SocketAddr::from_abstract_name(label.as_bytes()).expect("abstract address");
        let listener = UnixListener::bind_addr(&address).expect("bind abstract socket");
        HostListener { name, address: format!("@{label}"), listener }
    }

    /// Whether a client connected (a connection that was closed again still waits in the
    /// backlog).
    fn was_connected(&self) -> bool {
        self.listener.set_nonblocking(true).expect("nonblocking");
        match self.listener.accept() {
            Ok(_) => true,
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            Err(e) => panic!("accept on {}: {e}", self.address),
        }
    }
}

/// A tmux server of the host, run as the cell's user, killed when dropped.
struct HostTmux {
    socket: PathBuf,
    pid: u32,
}

impl HostTmux {
    fn start(world: &World, socket: PathBuf) -> HostTmux {
        let started = world
            .host_command("tmux")
            .arg("-S")
            .arg(&socket)
            .args(["new-session", "-d", "-s", "w", "-x", "80", "-y", "24", "bash --noprofile --norc"])
            .status()
            .expect("spawn tmux");
        assert!(started.success(), "test setup: the host tmux server did not start");
        let pid = world
            .host_command("tmux")
            .arg("-S")
            .arg(&socket)
            .args(["display-message", "-p", "#{pid}"])
            .output();
        let pid = String::from_utf8_lossy(&pid.expect("tmux display-message").stdout)
            .trim()
            .parse()
            .expect("tmux pid");
        HostTmux { socket, pid }
    }

    /// Types `line` into the session from the host.
    fn type_line(&self, world: &World, line: &str) {
        let status = world
            .host_command("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["send-keys", "-t", "w", line, "Enter"])
            .status()
            .expect("spawn tmux");
        assert!(status.success(), "test setup: tmux send-keys from the host failed");
    }
}

impl Drop for HostTmux {
    fn drop(&mut self) {
        host::sigkill(self.pid);
    }
}

const CLIENT: &str = r#"python3 - "$@" <<'PY'
import socket, sys
for spec in sys.argv[1:]:
    name, address = spec.split("=", 1)
    if address.startswith("@"):
        address = "\0" + address[1:]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(address)
        print(f"{name}: CONNECTED")
    except OSError as e:
        print(f"{name}: refused ({e.strerror})")
    finally:
        s.close()
for name, family, kind in (("AF_VSOCK", "AF_VSOCK", "SOCK_STREAM"), ("AF_PACKET", "AF_PACKET", "SOCK_RAW")):
    try:
        socket.socket(getattr(socket, family), getattr(socket, kind)).close()
        print(f"{name}: CREATED")
    except OSError as e:
        print(f"{name}: refused ({e.strerror})")
PY"#;

fn attack_host_sockets(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    world.require("tmux")?;
    let (uid, gid) = world.cell.user.ids();
    let tmp = tempfile::Builder::new().prefix("dsh-test-").tempdir_in("/tmp").expect("tempdir in /tmp");
    let run = tempfile::Builder::new().prefix("dsh-test-").tempdir_in("/run").expect("tempdir in /run");
    for dir in [tmp.path(), run.path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // The tmux server runs as the cell's user (tmux serves only its own user) and needs its
    // socket directory.
    host::chown_tree(tmp.path(), uid, gid);
    let listeners = [
        HostListener::pathname("tmp", tmp.path()),
        HostListener::pathname("run", run.path()),
        HostListener::abstract_name("abstract"),
    ];
    let tmux = HostTmux::start(world, tmp.path().join("tmux.sock"));
    let escaped = world.outside.join("ESCAPED");
    let targets: Vec<String> = listeners.iter().map(|l| q(format!("{}={}", l.name, l.address))).collect();
    let script = format!(
        "set -- {targets}\n{CLIENT}\ntmux -S {socket} send-keys -t w {keys} Enter 2>/dev/null && echo 'tmux: CONNECTED' || echo 'tmux: refused'",
        targets = targets.join(" "),
        socket = q(tmux.socket.display()),
        keys = q(format!("touch {}", escaped.display())),
    );
    let out = world.bash(&script);
    let report = verdicts(out.ok());
    let expected: Vec<(String, String)> = ["tmp", "run", "abstract", "AF_VSOCK", "AF_PACKET", "tmux"]
        .iter()
        .map(|name| ((*name).to_owned(), "refused".to_owned()))
        .collect();
    let mut problems = Vec::new();
    if report != expected {
        problems.push(format!("the command reached: {report:?}"));
    }
    for listener in &listeners {
        if listener.was_connected() {
            problems.push(format!(
                "the host server on {} ({}) saw a connection",
                listener.address, listener.name
            ));
        }
    }
    // Keys typed from the host run after any the command managed to send.
    let control = world.outside.join("control");
    tmux.type_line(world, &format!("touch {}", control.display()));
    assert!(
        wait_until(Duration::from_secs(10), || control.exists()),
        "test setup: the host tmux shell never ran"
    );
    if escaped.exists() {
        problems.push("the host tmux shell ran the command's keys".into());
    }
    assert!(problems.is_empty(), "{}\n{out:#?}", problems.join("; "));
    Ok(())
}

#[test]
fn world_cannot_reach_host_unix_sockets_tmux_vsock_or_packet_sockets() {
    over_matrix("world_cannot_reach_host_unix_sockets_tmux_vsock_or_packet_sockets", attack_host_sockets);
}
