//! Criterion benchmarks of the local executor against plain spawning.
//!
//! `cargo bench -p dsh-bench --bench exec`. The side-by-side table with ratios and
//! targets comes from `scripts/bench-exec` (the `bench_exec` binary).

use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_shell::{ShellExecRequest, ShellExecutor};
use dsh_subprocess::{ServiceOptions, SubprocessService};

fn executor(config: LocalBashConfig, spill_dir: &std::path::Path) -> LocalBashExecutor {
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(spill_dir.to_path_buf()),
        ..ServiceOptions::default()
    });
    LocalBashExecutor::new(config, service).expect("valid config")
}

fn run(runtime: &tokio::runtime::Runtime, executor: &LocalBashExecutor, command: &str) {
    runtime.block_on(async {
        let request = ShellExecRequest { command: command.to_owned(), ..ShellExecRequest::default() };
        let result = executor.run(executor.resolve(request).expect("resolve")).await.expect("run");
        assert_eq!(result.exit_code, Some(0));
    });
}

fn spawn(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let scratch = tempfile::tempdir().expect("scratch");
    let local = executor(LocalBashConfig::default(), scratch.path());
    let mut group = c.benchmark_group("spawn");
    group.bench_function("raw_bash_c_true", |b| {
        b.iter(|| Command::new("bash").args(["-c", "true"]).status().expect("bash"))
    });
    group.bench_function("executor_run_true", |b| b.iter(|| run(&runtime, &local, "true")));
    group.finish();
}

fn stream(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let scratch = tempfile::tempdir().expect("scratch");
    let local = executor(LocalBashConfig::default(), scratch.path());
    let mut group = c.benchmark_group("stream_256MiB");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Bytes(256 << 20));
    group.bench_function("executor_run_capture", |b| {
        b.iter(|| run(&runtime, &local, "head -c 256M /dev/zero"))
    });
    let sink = scratch.path().join("sink.bin");
    let redirect = format!("head -c 256M /dev/zero > '{}'", sink.display());
    group.bench_function("raw_redirect_to_file", |b| {
        b.iter(|| Command::new("bash").args(["-c", &redirect]).status().expect("bash"))
    });
    group.finish();
}

criterion_group!(benches, spawn, stream);
criterion_main!(benches);
