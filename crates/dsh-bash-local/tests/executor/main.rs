//! The local executor against real bash, real signals and real files.

mod argv;
mod background;
mod env;
mod probe;
mod resolve;
mod run;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_shell::{ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess, ShellRunResult};
pub use dsh_subprocess::group_has_live_member;
use dsh_subprocess::{ServiceOptions, SubprocessService};

/// An executor over its own service with spill files in `spill_dir`; the config starts as
/// a fast test setup (`graceMs: 200, timeoutMs: 10000`) and `tweak` adjusts it.
pub fn executor_in(
    spill_dir: &Path,
    tweak: impl FnOnce(&mut LocalBashConfig),
) -> (LocalBashExecutor, Arc<SubprocessService>) {
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(spill_dir.to_path_buf()),
        ..ServiceOptions::default()
    });
    let mut config = LocalBashConfig { grace_ms: 200.0, timeout_ms: 10_000.0, ..LocalBashConfig::default() };
    tweak(&mut config);
    let executor = LocalBashExecutor::new(config, Arc::clone(&service)).expect("valid config");
    (executor, service)
}

pub fn request(command: &str) -> ShellExecRequest {
    ShellExecRequest { command: command.to_owned(), ..ShellExecRequest::default() }
}

pub fn resolved(executor: &LocalBashExecutor, command: &str) -> ShellExecSpec {
    executor.resolve(request(command)).expect("resolve")
}

pub async fn run(executor: &LocalBashExecutor, command: &str) -> ShellRunResult {
    executor.run(resolved(executor, command)).await.expect("run")
}

pub async fn run_with_timeout(
    executor: &LocalBashExecutor,
    command: &str,
    timeout_ms: f64,
) -> ShellRunResult {
    let spec = executor
        .resolve(ShellExecRequest { timeout_ms: Some(timeout_ms), ..request(command) })
        .expect("resolve");
    executor.run(spec).await.expect("run")
}

/// Reads until `want` has accumulated (background output arrives asynchronously).
pub async fn read_until(process: &dyn ShellProcess, want: &str) -> String {
    let mut seen = String::new();
    let polled = tokio::time::timeout(Duration::from_secs(10), async {
        while !seen.contains(want) {
            seen.push_str(&process.read_output().delta);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "never saw {want:?}; got {seen:?}");
    seen
}

/// `line-0001\n` … `line-0100\n` (1000 bytes).
pub fn hundred_lines() -> String {
    (1..=100).map(|i| format!("line-{i:04}\n")).collect()
}

pub const HUNDRED_LINES: &str = r#"for i in $(seq 1 100); do printf "line-%04d\n" $i; done"#;
