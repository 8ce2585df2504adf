//! A throwaway `sshd` on loopback for tests: generated host and user keys, a known-hosts
//! file that knows the host key, killed (with every process it started) on drop.
//!
//! Its sessions run with `HOME` set to an empty directory of the fixture (the authorized
//! key's `environment=` option), so the user's shell start-up files do not run: bash reads
//! `~/.bashrc` for every command `sshd` starts, and a `.bashrc` that is slow or takes locks
//! (a version manager's shims, for one) would otherwise be part of every test. The working
//! directory is still the user's home directory from the password database.
//!
//! `MaxSessions` is sshd's default (10 channels per connection), as on most hosts.
//!
//! Needs `/usr/sbin/sshd`, `ssh-keygen` and, for logins as another user than the one running
//! it, root. [`LoopbackSshd::start_or_skip`] fails the test under `CI=true` when the daemon
//! cannot start, and otherwise prints why it skips.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{SshConfig, SshTarget};

/// The daemon the fixture runs.
pub const SSHD: &str = "/usr/sbin/sshd";

/// A running loopback `sshd` that lets the current user in with a generated key.
pub struct LoopbackSshd {
    dir: TempDir,
    port: u16,
    user: String,
    daemon: Option<Child>,
}

impl LoopbackSshd {
    /// Starts one, or says why it cannot.
    pub fn start() -> Result<Self, String> {
        if !Path::new(SSHD).exists() {
            return Err(format!("{SSHD} is not installed (Debian package openssh-server)"));
        }
        let dir =
            tempfile::Builder::new().prefix("dsh-sshd-").tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let user = run("id", &["-un"])?.trim().to_owned();
        for key in ["host_ed25519", "user_ed25519"] {
            let path = dir.path().join(key);
            let path = path.to_str().ok_or("the temp dir is not UTF-8")?;
            run("ssh-keygen", &["-q", "-t", "ed25519", "-N", "", "-C", key, "-f", path])?;
        }
        let home = dir.path().join("home");
        std::fs::create_dir(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        let public = std::fs::read_to_string(dir.path().join("user_ed25519.pub"))
            .map_err(|e| format!("user key: {e}"))?;
        let home = home.to_str().ok_or("the temp dir is not UTF-8")?;
        std::fs::write(dir.path().join("authorized_keys"), format!("environment=\"HOME={home}\" {public}"))
            .map_err(|e| format!("authorized_keys: {e}"))?;
        // sshd refuses to start without its privilege-separation directory.
        std::fs::create_dir_all("/run/sshd").map_err(|e| format!("/run/sshd: {e}"))?;
        // A free port at the time of asking; another process taking it before sshd binds
        // shows as a start failure, and one more port is tried.
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            match Self::launch(&dir, port) {
                Ok(daemon) => {
                    let mut sshd = LoopbackSshd { dir, port, user, daemon: Some(daemon) };
                    sshd.write_known_hosts()?;
                    return Ok(sshd);
                }
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// [`start`](Self::start), or `None` after printing why when not on CI; under `CI=true`
    /// a daemon that cannot start fails the calling test.
    #[track_caller]
    pub fn start_or_skip() -> Option<Self> {
        match Self::start() {
            Ok(sshd) => Some(sshd),
            Err(why) if ci() => panic!("CI=true: the loopback sshd is required and did not start: {why}"),
            Err(why) => {
                eprintln!("skipped: the loopback sshd did not start: {why}");
                None
            }
        }
    }

    fn launch(dir: &TempDir, port: u16) -> Result<Child, String> {
        let path = |name: &str| dir.path().join(name).display().to_string();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile {authorized}\n\
             PermitRootLogin prohibit-password\nPubkeyAuthentication yes\nPasswordAuthentication no\n\
             PermitUserEnvironment HOME\n\
             KbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\nPidFile {pid}\n\
             MaxStartups 64\nPrintMotd no\nLogLevel ERROR\n",
            host_key = path("host_ed25519"),
            authorized = path("authorized_keys"),
            pid = path("sshd.pid"),
        );
        std::fs::write(dir.path().join("sshd_config"), config).map_err(|e| format!("sshd_config: {e}"))?;
        let log = std::fs::File::create(dir.path().join("sshd.log")).map_err(|e| format!("sshd.log: {e}"))?;
        let mut daemon = Command::new(SSHD)
            .args(["-D", "-e", "-f", &path("sshd_config")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{SSHD}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(daemon);
            }
            let said = || std::fs::read_to_string(dir.path().join("sshd.log")).unwrap_or_default();
            if let Ok(Some(status)) = daemon.try_wait() {
                return Err(format!("{SSHD} exited ({status}): {}", said().trim()));
            }
            if Instant::now() > deadline {
                let _ = daemon.kill();
                let _ = daemon.wait();
                return Err(format!("{SSHD} did not listen on {address} within 10 s: {}", said().trim()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn write_known_hosts(&mut self) -> Result<(), String> {
        let public = std::fs::read_to_string(self.dir.path().join("host_ed25519.pub"))
            .map_err(|e| format!("host key: {e}"))?;
        let key: Vec<&str> = public.split_whitespace().take(2).collect();
        let mut file = std::fs::File::create(self.known_hosts()).map_err(|e| format!("known_hosts: {e}"))?;
        writeln!(file, "[127.0.0.1]:{} {}", self.port, key.join(" ")).map_err(|e| format!("known_hosts: {e}"))
    }

    /// The port it listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `user@127.0.0.1:port`, the user being the one running the tests.
    pub fn target(&self) -> SshTarget {
        SshTarget { user: Some(self.user.clone()), host: "127.0.0.1".to_owned(), port: Some(self.port) }
    }

    /// The user key's private half (its public half is the only authorized key).
    pub fn identity(&self) -> PathBuf {
        self.dir.path().join("user_ed25519")
    }

    /// A known-hosts file holding the daemon's host key (and nothing else).
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// A transport config that logs in with [`identity`](Self::identity) and checks the
    /// host against [`known_hosts`](Self::known_hosts).
    pub fn config(&self) -> SshConfig {
        SshConfig {
            identity: Some(self.identity()),
            known_hosts: Some(self.known_hosts()),
            ..SshConfig::new(self.target())
        }
    }

    /// The host key's fingerprint as `ssh-keygen -l` prints it (`SHA256:…`).
    pub fn host_fingerprint(&self) -> String {
        let public = self.dir.path().join("host_ed25519.pub");
        let listing = run("ssh-keygen", &["-l", "-f", &public.display().to_string()]).unwrap_or_default();
        listing.split_whitespace().nth(1).unwrap_or_default().to_owned()
    }

    /// A scratch directory that goes away with the daemon.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the daemon and every process under it (each connection's `sshd` and whatever it
    /// runs): to the client, the host just went away.
    pub fn kill(&mut self) {
        let Some(mut daemon) = self.daemon.take() else { return };
        let mut tree = descendants(daemon.id());
        tree.push(daemon.id());
        let pids: Vec<String> = tree.iter().map(u32::to_string).collect();
        let _ = Command::new("kill").arg("-KILL").args(&pids).stderr(Stdio::null()).status();
        let _ = daemon.wait();
    }
}

impl LoopbackSshd {
    /// Kills the `sshd` processes serving connections (not the listener, not the commands they
    /// run): to the client, its connection dropped; to the commands, their channel's streams
    /// ended. Returns how many it killed.
    pub fn drop_connections(&self) -> usize {
        let Some(daemon) = &self.daemon else { return 0 };
        let serving: Vec<String> = descendants(daemon.id())
            .into_iter()
            .filter(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                comm.trim_end().starts_with("sshd")
            })
            .map(|pid| pid.to_string())
            .collect();
        if !serving.is_empty() {
            let _ = Command::new("kill").arg("-KILL").args(&serving).stderr(Stdio::null()).status();
        }
        serving.len()
    }
}

impl Drop for LoopbackSshd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every process below `root`, from `/proc`'s parent links.
pub fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, ppid)| *ppid == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    found.remove(0);
    found
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true") || v.trim() == "1")
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("no free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| format!("no free port: {e}"))
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        false => {
            Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
        }
    }
}
