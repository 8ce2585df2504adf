//! The remote executor over the SSH transport, against a loopback `sshd`: what only a real
//! connection can show (the call's processes on the host, a connection lost mid-call).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_bash_local::LocalBashConfig;
use dsh_shell::{ShellError, ShellExecRequest, ShellExecutor};
use dsh_shell_remote::{RemoteExecutor, RemoteTransport};
use dsh_shell_ssh::SshTransport;
use dsh_shell_ssh::fixture::LoopbackSshd;
use dsh_subprocess::{ServiceOptions, SubprocessService};

fn executor(transport: Arc<SshTransport>, spill: &std::path::Path) -> RemoteExecutor {
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(spill.to_path_buf()),
        ..ServiceOptions::default()
    });
    let transport: Arc<dyn RemoteTransport> = transport;
    RemoteExecutor::new(transport, LocalBashConfig::default(), service).expect("executor")
}

/// Whether a process whose command line contains `needle` runs on this machine.
fn running(needle: &str) -> bool {
    std::fs::read_dir("/proc").expect("/proc").flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle))
    })
}

#[tokio::test]
async fn a_connection_lost_mid_call_is_an_error_naming_the_host() {
    let Some(mut sshd) = LoopbackSshd::start_or_skip() else { return };
    let transport = Arc::new(SshTransport::new(sshd.config()));
    let executor = Arc::new(executor(Arc::clone(&transport), sshd.dir()));
    let marker = format!("sleep 6003.{}", std::process::id());
    let request = ShellExecRequest { command: marker.clone(), ..ShellExecRequest::default() };
    let spec = executor.resolve(request).expect("resolved");
    let call = tokio::spawn({
        let executor = Arc::clone(&executor);
        async move { executor.run(spec).await }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !running(&marker) {
        assert!(Instant::now() < deadline, "the command started on the host within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sshd.kill();
    let result =
        tokio::time::timeout(Duration::from_secs(30), call).await.expect("the call ends").expect("joined");
    match result {
        Err(ShellError::Other(message)) => assert_eq!(
            message,
            format!("ssh executor: ssh {}: lost the connection to the host", sshd.target())
        ),
        other => panic!("not a lost connection: {other:?}"),
    }
    transport.shutdown().await.expect("shut down");
}
