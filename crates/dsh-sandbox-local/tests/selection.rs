//! Runner selection with injected probes (SB-18) and the `runnerCommand` bypass (SB-19).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_sandbox::{
    RunnerFailureRule, SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxProvider,
    SandboxUnavailableError,
};
use dsh_sandbox_local::{
    LocalSandboxConfig, LocalSandboxProvider, ProbeOutcome, RunnerCapability, RunnerKind, RunnerProber,
};

const UNAVAILABLE_RO: &str = "sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host; refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing kernel (Linux), ensure sandbox-exec is usable (macOS), or ensure the ACL restricted-token runner can start (Windows) — otherwise switch the consumer to danger-full-access.";

/// A prober answering from a table and counting every call.
struct FakeProber {
    landlock: ProbeOutcome,
    bwrap: ProbeOutcome,
    calls: Mutex<Vec<RunnerKind>>,
    unprobed_calls: AtomicUsize,
    timeouts: Mutex<Vec<Duration>>,
}

impl FakeProber {
    fn new(landlock: ProbeOutcome, bwrap: ProbeOutcome) -> Arc<Self> {
        Arc::new(Self {
            landlock,
            bwrap,
            calls: Mutex::new(Vec::new()),
            unprobed_calls: AtomicUsize::new(0),
            timeouts: Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> Vec<RunnerKind> {
        self.calls.lock().unwrap().clone()
    }
}

impl RunnerProber for FakeProber {
    fn probe(&self, runner: RunnerKind, timeout: Duration) -> ProbeOutcome {
        self.calls.lock().unwrap().push(runner);
        self.timeouts.lock().unwrap().push(timeout);
        match runner {
            RunnerKind::Landlock => self.landlock.clone(),
            RunnerKind::Bwrap => self.bwrap.clone(),
        }
    }

    fn unprobed(&self, _runner: RunnerKind) -> RunnerCapability {
        self.unprobed_calls.fetch_add(1, Ordering::SeqCst);
        RunnerCapability::full()
    }

    fn version(&self, runner: RunnerKind, _timeout: Duration) -> Option<String> {
        Some(format!("fake {}", runner.as_str()))
    }
}

fn full() -> ProbeOutcome {
    ProbeOutcome::Usable(RunnerCapability::full())
}

fn unusable() -> ProbeOutcome {
    ProbeOutcome::Unusable("probe failed: exit status: 1".into())
}

fn policy(mode: SandboxMode, root: &str) -> SandboxExecutionPolicy {
    SandboxExecutionPolicy::new(mode, PathBuf::from(root), None)
}

fn argv(cmd: &[&str]) -> Vec<String> {
    cmd.iter().map(|s| (*s).to_owned()).collect()
}

fn provider(runners: &[RunnerKind], prober: Arc<FakeProber>) -> LocalSandboxProvider {
    let config = LocalSandboxConfig { runners: runners.to_vec(), ..LocalSandboxConfig::default() };
    LocalSandboxProvider::with_prober(config, prober).unwrap()
}

const RO_PROFILE: [&str; 8] =
    ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--die-with-parent"];

/// The exact base profile comes first; the command's own world follows it (a new
/// session, a PID, UTS and IPC namespace, `/proc/sys` read-only, no capabilities, the seccomp
/// program), then `--` and the argv.
fn assert_world_after_profile(argv: &[String], profile: &[&str], tail: &[&str]) {
    assert_eq!(&argv[..profile.len()], profile, "{argv:?}");
    assert_eq!(&argv[argv.len() - tail.len()..], tail, "{argv:?}");
    let world = &argv[profile.len()..argv.len() - tail.len()];
    for expected in [
        &["--new-session"][..],
        &["--unshare-pid"],
        &["--unshare-uts"],
        &["--unshare-ipc"],
        &["--ro-bind-try", "/proc/sys", "/proc/sys"],
        &["--cap-drop", "ALL"],
        &["--seccomp"],
    ] {
        assert!(world.windows(expected.len()).any(|w| w == expected), "{expected:?} missing from {world:?}");
    }
    let tmp =
        world.windows(3).find(|w| w[0] == "--bind" || w[0] == "--ro-bind").filter(|w| w[2] == "/dev/shm");
    assert!(tmp.is_some(), "no private /dev/shm in {world:?}");
    assert!(
        world.windows(2).any(|w| w[1] == "/tmp" && (w[0].ends_with("/tmp"))),
        "no private /tmp in {world:?}"
    );
}

#[test]
fn sb_18_bwrap_first_and_passing_is_selected_without_probing_landlock() {
    let prober = FakeProber::new(full(), full());
    let provider = provider(&[RunnerKind::Bwrap, RunnerKind::Landlock], prober.clone());
    let confined = provider.confine(&argv(&["true"]), &policy(SandboxMode::ReadOnly, "/ws")).unwrap();
    let mut expected = vec!["bwrap"];
    expected.extend(RO_PROFILE);
    assert_world_after_profile(&confined.argv, &expected, &["--", "true"]);
    assert_eq!(confined.enforcement, SandboxEnforcement::Full);
    assert_eq!(confined.denial_signatures, ["read-only file system", "permission denied"]);
    assert_eq!(confined.runner_failure_rules, vec![RunnerFailureRule::fatal(&["bwrap: "])]);
    assert_eq!(confined.runner.as_deref(), Some("bwrap"));
    assert!(confined.child_confinement.is_some(), "the seccomp descriptor and scope are set up in the child");
    assert_eq!(prober.calls(), vec![RunnerKind::Bwrap]);
    assert_eq!(*prober.timeouts.lock().unwrap(), vec![Duration::from_millis(5000)]);
}

#[test]
fn sb_18_landlock_unusable_falls_back_to_bwrap_and_the_verdict_is_cached() {
    let prober = FakeProber::new(unusable(), full());
    let provider = provider(&[RunnerKind::Landlock, RunnerKind::Bwrap], prober.clone());
    let ww = policy(SandboxMode::WorkspaceWrite, "/ws");
    for _ in 0..3 {
        let confined = provider.confine(&argv(&["bash", "-c", "echo hi"]), &ww).unwrap();
        let mut expected = vec!["bwrap"];
        expected.extend(RO_PROFILE);
        expected.extend(["--tmpfs", "/tmp", "--bind", "/ws", "/ws"]);
        assert_world_after_profile(&confined.argv, &expected, &["--", "bash", "-c", "echo hi"]);
    }
    assert_eq!(prober.calls(), vec![RunnerKind::Landlock, RunnerKind::Bwrap]);
}

#[test]
fn sb_18_landlock_in_process_keeps_argv_and_carries_the_landlock_dialect() {
    let prober = FakeProber::new(full(), full());
    let provider = provider(&[RunnerKind::Landlock, RunnerKind::Bwrap], prober.clone());
    let confined = provider
        .confine(&argv(&["bash", "-c", "echo hi"]), &policy(SandboxMode::WorkspaceWrite, "/ws"))
        .unwrap();
    assert_eq!(confined.argv, ["bash", "-c", "echo hi"]);
    assert!(confined.child_confinement.is_some());
    assert_eq!(confined.runner, None);
    assert_eq!(confined.enforcement, SandboxEnforcement::Full);
    assert_eq!(
        confined.denial_signatures,
        ["permission denied", "read-only file system", "invalid cross-device link"]
    );
    assert_eq!(
        confined.runner_failure_rules,
        vec![RunnerFailureRule {
            allowed_exit_codes: Some(vec![125]),
            fatal_signatures: vec!["landlock-run: ".into()],
            informational_lines: vec!["landlock-run: partial enforcement (older Landlock ABI)".into()],
        }]
    );
    assert_eq!(prober.calls(), vec![RunnerKind::Landlock]);
}

#[test]
fn sb_18_landlock_partial_report_is_carried_to_each_confined_command() {
    let partial = ProbeOutcome::Usable(RunnerCapability {
        enforcement: SandboxEnforcement::Partial,
        mount_namespace: false,
        notes: vec!["mount namespace unavailable".into()],
    });
    let prober = FakeProber::new(partial, full());
    let provider = provider(&[RunnerKind::Landlock, RunnerKind::Bwrap], prober.clone());
    let confined = provider.confine(&argv(&["true"]), &policy(SandboxMode::ReadOnly, "/ws")).unwrap();
    assert_eq!(confined.enforcement, SandboxEnforcement::Partial);
    assert_eq!(confined.denial_signatures, ["permission denied", "invalid cross-device link"]);
    assert_eq!(prober.calls(), vec![RunnerKind::Landlock]);
}

#[test]
fn sb_18_all_probes_failing_is_unavailable_cached_and_each_probe_runs_once() {
    let prober = FakeProber::new(unusable(), unusable());
    let provider = provider(&[RunnerKind::Landlock, RunnerKind::Bwrap], prober.clone());
    for _ in 0..2 {
        let error = provider.confine(&argv(&["true"]), &policy(SandboxMode::ReadOnly, "/ws")).unwrap_err();
        assert_eq!(error, SandboxUnavailableError::new(SandboxMode::ReadOnly));
        assert_eq!(error.to_string(), UNAVAILABLE_RO);
        assert_eq!(error.info().code, "SANDBOX_UNAVAILABLE");
    }
    let ww = provider.confine(&argv(&["true"]), &policy(SandboxMode::WorkspaceWrite, "/ws")).unwrap_err();
    assert!(ww.to_string().starts_with("sandbox mode \"workspace-write\" is requested"));
    assert_eq!(prober.calls(), vec![RunnerKind::Landlock, RunnerKind::Bwrap]);

    // describe() reuses the cached probes.
    let report = provider.describe();
    assert_eq!(report.selected, None);
    assert_eq!(prober.calls(), vec![RunnerKind::Landlock, RunnerKind::Bwrap]);
    assert_eq!(
        report.to_string(),
        "sandbox provider: sandbox-local\nselected runner: none (confined commands are refused)\n  landlock: unusable, fake landlock\n    - probe failed: exit status: 1\n  bwrap: unusable, fake bwrap\n    - probe failed: exit status: 1\n"
    );
}

#[test]
fn sb_18_a_single_candidate_is_selected_without_probing() {
    let prober = FakeProber::new(unusable(), unusable());
    let provider = provider(&[RunnerKind::Bwrap], prober.clone());
    let confined = provider.confine(&argv(&["true"]), &policy(SandboxMode::ReadOnly, "/ws")).unwrap();
    assert_eq!(confined.argv[0], "bwrap");
    provider.confine(&argv(&["true"]), &policy(SandboxMode::ReadOnly, "/ws")).unwrap();
    assert!(prober.calls().is_empty());
    assert_eq!(prober.unprobed_calls.load(Ordering::SeqCst), 1);
}

#[test]
fn sb_19_runner_command_bypasses_selection_and_probing() {
    let prober = FakeProber::new(full(), full());
    let config = LocalSandboxConfig {
        runner_command: argv(&["fake-runner", "--flag"]),
        runner_failure_signatures: argv(&["fake-runner: profile rejected"]),
        ..LocalSandboxConfig::default()
    };
    let provider = LocalSandboxProvider::with_prober(config, prober.clone()).unwrap();
    let confined = provider
        .confine(&argv(&["bash", "-c", "echo hi"]), &policy(SandboxMode::WorkspaceWrite, "/ws"))
        .unwrap();
    let mut expected = vec!["fake-runner", "--flag"];
    expected.extend(RO_PROFILE);
    expected.extend(["--tmpfs", "/tmp", "--bind", "/ws", "/ws", "--", "bash", "-c", "echo hi"]);
    assert_eq!(confined.argv, expected);
    assert_eq!(confined.enforcement, SandboxEnforcement::Full);
    assert_eq!(confined.denial_signatures, ["read-only file system", "permission denied"]);
    assert_eq!(
        confined.runner_failure_rules,
        vec![RunnerFailureRule::fatal(&["fake-runner: profile rejected"])]
    );
    assert_eq!(confined.runner.as_deref(), Some("fake-runner"));
    assert!(prober.calls().is_empty());
    assert_eq!(prober.unprobed_calls.load(Ordering::SeqCst), 0);
}

#[test]
fn sb_19_invalid_configs_fail_at_construction() {
    let prober = FakeProber::new(full(), full());
    let config = LocalSandboxConfig { probe_timeout_ms: 0.0, ..LocalSandboxConfig::default() };
    assert_eq!(
        LocalSandboxProvider::with_prober(config, prober).unwrap_err().to_string(),
        "sandbox-local: probeTimeoutMs must be a positive finite number"
    );
}

#[test]
fn danger_full_access_is_passed_through_without_probing() {
    let prober = FakeProber::new(full(), full());
    let provider = provider(&[RunnerKind::Landlock, RunnerKind::Bwrap], prober.clone());
    let confined =
        provider.confine(&argv(&["echo", "free"]), &policy(SandboxMode::DangerFullAccess, "/ws")).unwrap();
    assert_eq!(confined.argv, ["echo", "free"]);
    assert!(confined.child_confinement.is_none());
    assert!(confined.denial_signatures.is_empty() && confined.runner_failure_rules.is_empty());
    assert!(prober.calls().is_empty());
}

#[test]
fn the_provider_report_lists_every_runner_with_its_probe_verdict() {
    let prober = FakeProber::new(unusable(), full());
    let provider = provider(&[RunnerKind::Bwrap], prober.clone());
    let report = provider.describe();
    assert_eq!(report.selected.as_deref(), Some("bwrap"));
    assert_eq!(
        report.to_string(),
        "sandbox provider: sandbox-local\nselected runner: bwrap (enforcement full)\n  bwrap: usable, enforcement full, fake bwrap\n  landlock: unusable, fake landlock\n    - not in the configured chain\n    - probe failed: exit status: 1\n"
    );
}

#[test]
fn warming_selects_the_runner_before_the_first_confine_and_doctor_reuses_it() {
    let prober = FakeProber::new(unusable(), full());
    let provider = Arc::new(provider(&[RunnerKind::Landlock, RunnerKind::Bwrap], prober.clone()));
    let warming = Arc::clone(&provider);
    std::thread::spawn(move || warming.warm()).join().expect("warm");
    assert_eq!(prober.calls(), vec![RunnerKind::Landlock, RunnerKind::Bwrap], "probed while warming");
    let confined = provider.confine(&argv(&["true"]), &policy(SandboxMode::ReadOnly, "/ws")).unwrap();
    assert_eq!(confined.runner.as_deref(), Some("bwrap"));
    assert_eq!(provider.describe().selected.as_deref(), Some("bwrap"));
    assert_eq!(prober.calls(), vec![RunnerKind::Landlock, RunnerKind::Bwrap], "nothing probed again");
}
