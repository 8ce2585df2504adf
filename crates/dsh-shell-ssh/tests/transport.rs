//! The SSH transport against a loopback `sshd` (this machine is the remote host, so the tests
//! look at the remote side through `/proc`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsh_shell_remote::{RemoteError, RemoteExecSpec, RemoteExit, RemoteTransport};
use dsh_shell_ssh::fixture::LoopbackSshd;
use dsh_shell_ssh::{SshConfig, SshTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Ran {
    stdout: String,
    stderr: String,
    exit: Result<RemoteExit, RemoteError>,
}

async fn run(transport: &SshTransport, spec: RemoteExecSpec, input: Option<&str>) -> Ran {
    let mut child = transport.exec(spec).await.expect("started");
    if let Some(input) = input {
        let mut stdin = child.stdin.take().expect("a stdin was asked for");
        stdin.write_all(input.as_bytes()).await.expect("stdin written");
        drop(stdin);
    }
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let (out, err) =
        tokio::join!(child.stdout.read_to_string(&mut stdout), child.stderr.read_to_string(&mut stderr));
    out.expect("stdout read");
    err.expect("stderr read");
    Ran { stdout, stderr, exit: child.exit.await }
}

fn argv(words: &[&str]) -> RemoteExecSpec {
    RemoteExecSpec { argv: words.iter().map(|w| (*w).to_owned()).collect(), ..Default::default() }
}

fn code(code: i32) -> Result<RemoteExit, RemoteError> {
    Ok(RemoteExit { code: Some(code), out_of_memory: false })
}

/// The processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle).then_some(pid)
        })
        .collect()
}

/// The process group of `pid`, from `/proc/<pid>/stat`.
fn pgid_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

fn members_of_group(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| pgid_of(*pid) == Some(pgid))
        .collect()
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn runs_argv_with_cwd_env_and_stdin() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    let spec = RemoteExecSpec {
        cwd: Some(sshd.dir().to_path_buf()),
        env: BTreeMap::from([("GREETING".to_owned(), "hello there".to_owned())]),
        stdin: true,
        ..argv(&["sh", "-c", "pwd; printf '%s\\n' \"$GREETING\"; cat; echo oops >&2; exit 3"])
    };
    let ran = run(&transport, spec, Some("from stdin\n")).await;
    assert_eq!(ran.stdout, format!("{}\nhello there\nfrom stdin\n", sshd.dir().display()));
    assert_eq!(ran.stderr, "oops\n");
    assert_eq!(ran.exit, code(3));
    transport.shutdown().await.expect("shut down");
}

/// The fixture's sessions do not run the user's shell start-up files: `HOME` is an empty
/// directory of the fixture (bash reads `$HOME/.bashrc` for commands `sshd` starts).
#[tokio::test]
async fn the_fixture_sessions_have_a_home_of_their_own() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    let ran = run(&transport, argv(&["bash", "-c", "echo \"$HOME\"; ls -A \"$HOME\" | wc -l"]), None).await;
    assert_eq!(ran.stdout, format!("{}\n0\n", sshd.dir().join("home").display()), "{}", ran.stderr);
    assert_eq!(ran.exit, code(0));
    transport.shutdown().await.expect("shut down");
}

#[tokio::test]
async fn reports_exit_statuses_as_the_program_gave_them() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    for status in [0, 1, 126, 127, 255] {
        let ran = run(&transport, argv(&["sh", "-c", &format!("exit {status}")]), None).await;
        assert_eq!(ran.exit, code(status), "exit {status}");
    }
    let ran = run(&transport, argv(&["no-such-program-anywhere"]), None).await;
    assert_eq!(ran.exit, code(127));
    assert!(ran.stderr.contains("no-such-program-anywhere"), "{}", ran.stderr);
    // Without stdin asked for, the program reads end of file at once.
    let ran = run(&transport, argv(&["cat"]), None).await;
    assert_eq!((ran.stdout.as_str(), ran.exit), ("", code(0)));
    transport.shutdown().await.expect("shut down");
}

#[tokio::test]
async fn no_argument_directory_or_value_becomes_shell_syntax() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    let marker = sshd.dir().join("injected");
    let payloads = [
        format!("$(touch {})", marker.display()),
        format!("`touch {}`", marker.display()),
        format!("'; touch {}; '", marker.display()),
        format!("\"; touch {}; \"", marker.display()),
        format!("x\ntouch {}\n", marker.display()),
        "* ~ $HOME ${PATH} \\ !".to_owned(),
        String::new(),
    ];
    // A directory name cannot hold '/': its payload touches a file by a name of its own,
    // wherever the remote shell would run it (the login's home, the directory itself).
    let stray = format!("dsh-ssh-injected-{}", std::process::id());
    let odd_dir = sshd.dir().join(format!("d '$(touch {stray})'\n`touch {stray}`\"\\"));
    std::fs::create_dir(&odd_dir).expect("odd directory");
    let env = payloads.iter().enumerate().map(|(i, value)| (format!("V{i}"), value.clone())).collect();
    let mut words = vec![
        "sh",
        "-c",
        "pwd; for a; do printf '<%s>' \"$a\"; done; printf '|%s' \"$V0\" \"$V2\" \"$V4\"",
        "sh",
    ];
    words.extend(payloads.iter().map(String::as_str));
    let spec = RemoteExecSpec { cwd: Some(odd_dir.clone()), env, ..argv(&words) };
    let ran = run(&transport, spec, None).await;
    let args: String = payloads.iter().map(|p| format!("<{p}>")).collect();
    assert_eq!(
        ran.stdout,
        format!("{}\n{args}|{}|{}|{}", odd_dir.display(), payloads[0], payloads[2], payloads[4]),
        "stderr: {}",
        ran.stderr
    );
    assert_eq!(ran.exit, code(0));
    assert!(!marker.exists(), "a payload ran as a command");
    let home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    for dir in [home.as_path(), sshd.dir(), odd_dir.as_path()] {
        assert!(!dir.join(&stray).exists(), "the directory's name ran as a command in {}", dir.display());
    }
    transport.shutdown().await.expect("shut down");
}

#[tokio::test]
async fn a_second_exec_on_the_same_master_kills_a_remote_process_group() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    let mut child = transport
        .exec(argv(&["sh", "-c", "echo $$; sleep 3001 & sleep 3002 & wait"]))
        .await
        .expect("started");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while byte != *b"\n" {
        child.stdout.read_exact(&mut byte).await.expect("the shell's pid");
        line.push(byte[0]);
    }
    let pid: u32 = String::from_utf8_lossy(&line).trim().parse().expect("a pid");
    let pgid = pgid_of(pid).expect("the remote shell is on this machine");
    eventually("both sleeps started", || members_of_group(pgid).len() >= 3).await;
    let killed = run(&transport, argv(&["kill", "-TERM", "--", &format!("-{pgid}")]), None).await;
    assert_eq!(killed.exit, code(0), "{}", killed.stderr);
    // Ended by a signal: the far side reports no exit code, and the connection is fine.
    assert_eq!(child.exit.await, Ok(RemoteExit { code: None, out_of_memory: false }));
    eventually("the group is gone", || members_of_group(pgid).is_empty()).await;
    assert_eq!(run(&transport, argv(&["true"]), None).await.exit, code(0));
    transport.shutdown().await.expect("shut down");
}

#[tokio::test]
async fn an_unknown_host_key_is_refused_with_its_fingerprint_and_not_added() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let known_hosts = sshd.dir().join("empty_known_hosts");
    std::fs::write(&known_hosts, "").expect("known_hosts");
    let transport = SshTransport::new(SshConfig { known_hosts: Some(known_hosts.clone()), ..sshd.config() });
    let err = transport.exec(argv(&["true"])).await.err().expect("refused");
    let RemoteError::Unavailable(message) = err else { panic!("not Unavailable: {err:?}") };
    let fingerprint = sshd.host_fingerprint();
    assert!(fingerprint.starts_with("SHA256:"), "{fingerprint}");
    assert_eq!(
        message,
        format!(
            "ssh {}: refused: unknown host key ED25519 {fingerprint}: not in {} and not added; \
             if that fingerprint is the host's, add its key to that file",
            sshd.target(),
            known_hosts.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&known_hosts).expect("known_hosts"), "");
    // `probe` (doctor) says the same.
    assert!(matches!(transport.probe().await, Err(RemoteError::Unavailable(m)) if m.contains(&fingerprint)));
}

#[tokio::test]
async fn a_changed_host_key_is_refused() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let other = sshd.dir().join("other_host_key");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
    let public = std::fs::read_to_string(other.with_extension("pub")).expect("public key");
    let known_hosts = sshd.dir().join("stale_known_hosts");
    std::fs::write(&known_hosts, format!("[127.0.0.1]:{} {public}", sshd.port())).expect("known_hosts");
    let transport = SshTransport::new(SshConfig { known_hosts: Some(known_hosts.clone()), ..sshd.config() });
    let err = transport.exec(argv(&["true"])).await.err().expect("refused");
    let message = err.to_string();
    assert!(matches!(err, RemoteError::Unavailable(_)), "{err:?}");
    assert!(
        message.starts_with(&format!("ssh {}: refused: the host key changed", sshd.target())),
        "{message}"
    );
    assert!(message.contains(&sshd.host_fingerprint()), "{message}");
}

#[tokio::test]
async fn a_key_the_host_does_not_accept_is_an_authentication_failure() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let stranger = sshd.dir().join("stranger");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stranger)
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
    let transport = SshTransport::new(SshConfig { identity: Some(stranger), ..sshd.config() });
    let message = transport.exec(argv(&["true"])).await.err().expect("refused").to_string();
    assert!(
        message.starts_with(&format!("ssh {}: authentication failed (", sshd.target()))
            && message.contains("Permission denied")
            && message.ends_with(
                "offer a key through the ssh agent (SSH_AUTH_SOCK) or name one with --ssh-identity"
            ),
        "{message}"
    );
}

#[tokio::test]
async fn a_connection_lost_mid_call_is_an_error_not_an_exit() {
    let Some(mut sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    let mut child =
        transport.exec(argv(&["sh", "-c", "echo started; exec sleep 3003"])).await.expect("started");
    let mut started = [0u8; 8];
    child.stdout.read_exact(&mut started).await.expect("started");
    sshd.kill();
    let exit = tokio::time::timeout(Duration::from_secs(20), child.exit).await.expect("the exit resolves");
    assert_eq!(
        exit,
        Err(RemoteError::Failed(format!("ssh {}: lost the connection to the host", sshd.target())))
    );
    let next = transport.exec(argv(&["true"])).await.err().expect("the host is gone");
    assert!(
        matches!(&next, RemoteError::Unavailable(m) if m.starts_with(&format!("ssh {}: cannot connect: ", sshd.target()))),
        "{next:?}"
    );
}

#[tokio::test]
async fn one_master_carries_concurrent_calls_and_shutdown_ends_it() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    assert_eq!(transport.control_socket().await, None, "nothing opens before the first exec");
    // As many as sshd's default MaxSessions lets one connection carry.
    let calls = (0..10).map(|i| run(&transport, argv(&["sh", "-c", &format!("sleep 0.2; echo {i}")]), None));
    for (i, ran) in futures::future::join_all(calls).await.into_iter().enumerate() {
        assert_eq!((ran.stdout, ran.exit), (format!("{i}\n"), code(0)));
    }
    let socket: PathBuf = transport.control_socket().await.expect("open");
    let socket = socket.display().to_string();
    let masters = processes_with(&socket);
    assert_eq!(masters.len(), 1, "one master process: {masters:?}");
    let uname = std::process::Command::new("uname").arg("-srm").output().expect("uname");
    assert_eq!(transport.probe().await, Ok(String::from_utf8_lossy(&uname.stdout).trim().to_owned()));
    transport.shutdown().await.expect("shut down");
    eventually("the master exits", || processes_with(&socket).is_empty()).await;
    let after = transport.exec(argv(&["true"])).await.err().expect("closed");
    assert_eq!(
        after,
        RemoteError::Unavailable(format!("ssh {}: the connection was shut down", sshd.target()))
    );
    transport.shutdown().await.expect("shutdown is idempotent");
}

#[tokio::test]
async fn programs_do_not_look_started_by_sshd_to_bash() {
    let Some(sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = SshTransport::new(sshd.config());
    // Without SSH_CLIENT a non-interactive bash reads no ~/.bashrc, as under the local executor.
    let ran = run(
        &transport,
        argv(&["sh", "-c", "echo \"${SSH_CLIENT-unset} ${SSH2_CLIENT-unset} ${SSH_CONNECTION:+kept}\""]),
        None,
    )
    .await;
    assert_eq!((ran.stdout.as_str(), ran.exit), ("unset unset kept\n", code(0)));
    transport.shutdown().await.expect("shut down");
}
