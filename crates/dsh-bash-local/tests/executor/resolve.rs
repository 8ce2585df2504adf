use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::AbortSignal;
use dsh_shell::{ShellExecRequest, ShellExecutor, ShellTimeout};
use dsh_subprocess::SubprocessService;

use crate::{executor_in, request};

#[test]
fn ex_01_resolve_defaults() {
    let executor =
        LocalBashExecutor::new(LocalBashConfig::default(), SubprocessService::new()).expect("executor");
    let spec = executor.resolve(request("echo hi")).expect("resolve");
    assert_eq!(spec.command, "echo hi");
    assert_eq!(spec.workdir, std::env::current_dir().expect("cwd"));
    assert_eq!(spec.timeout, ShellTimeout::from_millis(120_000.0));
    assert_eq!(spec.timeout.duration(), Duration::from_secs(120));
    assert_eq!(spec.stdout_max_bytes, 64_000);
    assert!(spec.sandbox_policy.is_none());
    assert!(spec.stdin.is_none() && spec.env.is_none() && spec.dsh_env.is_none() && spec.signal.is_none());
}

#[test]
fn resolve_carries_optional_fields_verbatim_and_prefers_the_request_workdir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.cwd = Some("/configured".into()));
    assert_eq!(executor.resolve(request("x")).expect("resolve").workdir, PathBuf::from("/configured"));
    let env = BTreeMap::from([("A".to_owned(), "1".to_owned())]);
    let spec = executor
        .resolve(ShellExecRequest {
            workdir: Some("/asked".into()),
            stdin: Some(b"in".to_vec()),
            env: Some(env.clone()),
            dsh_env: Some(env.clone()),
            signal: Some(AbortSignal::new()),
            ..request("x")
        })
        .expect("resolve");
    assert_eq!(spec.workdir, PathBuf::from("/asked"));
    assert_eq!(spec.stdin.as_deref(), Some(&b"in"[..]));
    assert_eq!((spec.env.as_ref(), spec.dsh_env.as_ref()), (Some(&env), Some(&env)));
    assert!(spec.signal.is_some());
}

#[test]
fn ex_02_request_validation() {
    let executor =
        LocalBashExecutor::new(LocalBashConfig::default(), SubprocessService::new()).expect("executor");
    for bad in [f64::NAN, -1.0, 0.0, f64::INFINITY] {
        let err =
            executor.resolve(ShellExecRequest { timeout_ms: Some(bad), ..request("x") }).expect_err("bad");
        assert_eq!(err.to_string(), "bash-local: request.timeoutMs must be a positive finite number");
        let err = executor
            .resolve(ShellExecRequest { stdout_max_bytes: Some(bad), ..request("x") })
            .expect_err("bad");
        assert_eq!(err.to_string(), "bash-local: request.stdoutMaxBytes must be a positive finite number");
    }
    let err = LocalBashExecutor::new(
        LocalBashConfig { grace_ms: 2_147_483_648.0, ..LocalBashConfig::default() },
        SubprocessService::new(),
    )
    .err()
    .expect("refused");
    assert_eq!(err.to_string(), "bash-local: graceMs must be no greater than 2147483647");
    let err = LocalBashExecutor::new(
        LocalBashConfig { max_spill_bytes: 0.0, ..LocalBashConfig::default() },
        SubprocessService::new(),
    )
    .err()
    .expect("refused");
    assert_eq!(err.to_string(), "bash-local: maxSpillBytes must be a positive finite number");
}

#[test]
fn bf_12_timeout_default_and_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| {
        c.timeout_ms = 1000.0;
        c.max_timeout_ms = 2000.0;
    });
    assert_eq!(executor.resolve(request("true")).expect("resolve").timeout.millis(), 1000.0);
    let capped = executor.resolve(ShellExecRequest { timeout_ms: Some(99_999.0), ..request("true") });
    assert_eq!(capped.expect("resolve").timeout.duration(), Duration::from_secs(2));
    let fraction = executor.resolve(ShellExecRequest { timeout_ms: Some(1.5), ..request("true") });
    let fraction = fraction.expect("resolve").timeout;
    assert_eq!((fraction.millis(), fraction.duration()), (1.5, Duration::from_micros(1500)));
    // A value finer than a nanosecond keeps its reported number and still arms a timer.
    let tiny = executor.resolve(ShellExecRequest { timeout_ms: Some(1e-7), ..request("true") });
    let tiny = tiny.expect("resolve").timeout;
    assert_eq!((tiny.millis(), tiny.duration()), (1e-7, Duration::from_nanos(1)));
    let (executor, _service) = executor_in(dir.path(), |c| {
        c.timeout_ms = 5000.0;
        c.max_timeout_ms = 2000.0;
    });
    assert_eq!(
        executor.resolve(request("true")).expect("resolve").timeout.millis(),
        2000.0,
        "the default is capped too"
    );
    let default =
        LocalBashExecutor::new(LocalBashConfig::default(), SubprocessService::new()).expect("executor");
    assert_eq!(default.resolve(request("true")).expect("resolve").timeout.millis(), 120_000.0);
}

#[test]
fn ex_03_stdout_budget_defaults_to_max_output_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (executor, _service) = executor_in(dir.path(), |c| c.max_output_bytes = 100.0);
    assert_eq!(executor.resolve(request("true")).expect("resolve").stdout_max_bytes, 100);
    let fraction = executor.resolve(ShellExecRequest { stdout_max_bytes: Some(99.9), ..request("true") });
    assert_eq!(fraction.expect("resolve").stdout_max_bytes, 99, "fractions round down");
}
