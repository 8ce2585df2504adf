//! Median cost of a confined `bash -c true` under each runner versus an unconfined spawn.
//!
//! `cargo run --release -p dsh-bench --bin confine_bench -- [iterations]`

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_sandbox::{SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxProvider};
use dsh_sandbox_local::{
    LocalSandboxConfig, LocalSandboxProvider, ProbeOutcome, RunnerCapability, RunnerKind, RunnerProber,
    SystemProber,
};

/// Forces the Landlock runner without its mount namespace.
struct LandlockOnly;

impl RunnerProber for LandlockOnly {
    fn probe(&self, _: RunnerKind, _: Duration) -> ProbeOutcome {
        ProbeOutcome::Usable(self.unprobed(RunnerKind::Landlock))
    }
    fn unprobed(&self, _: RunnerKind) -> RunnerCapability {
        RunnerCapability { enforcement: SandboxEnforcement::Partial, mount_namespace: false, notes: vec![] }
    }
    fn version(&self, _: RunnerKind, _: Duration) -> Option<String> {
        None
    }
}

/// A named spawn to time.
type Variant = (&'static str, Box<dyn Fn()>);

/// User + system CPU time of this process and its reaped children.
fn cpu_time() -> Duration {
    let mut total = Duration::ZERO;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: getrusage fills the zeroed struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid `who` and a live out-pointer.
        unsafe { libc::getrusage(who, &mut usage) };
        for tv in [usage.ru_utime, usage.ru_stime] {
            total += Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64);
        }
    }
    total
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn spawn_plain(cwd: &std::path::Path, fork: bool) {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", "true"])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if fork {
        // A no-op hook: std then forks instead of using posix_spawn, like any hooked spawn.
        // SAFETY: the hook does nothing.
        unsafe { cmd.pre_exec(|| Ok(())) };
    }
    let status = cmd.status().expect("spawn bash");
    assert!(status.success());
}

fn spawn_confined(provider: &LocalSandboxProvider, policy: &SandboxExecutionPolicy) {
    let argv = ["bash".to_owned(), "-c".to_owned(), "true".to_owned()];
    let confined = provider.confine(&argv, policy).expect("confine");
    let mut cmd = Command::new(&confined.argv[0]);
    cmd.args(&confined.argv[1..])
        .current_dir(&policy.workspace_root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if let Some(hook) = confined.pre_exec_hook() {
        // SAFETY: a `PreExecHook` is async-signal-safe (its maker promised so).
        unsafe { cmd.pre_exec(move || hook.run()) };
    }
    let status = cmd.status().expect("spawn confined");
    assert!(status.success(), "{:?}", confined.argv);
}

fn provider(kind: RunnerKind, prober: Arc<dyn RunnerProber>) -> LocalSandboxProvider {
    let config = LocalSandboxConfig { runners: vec![kind], ..LocalSandboxConfig::default() };
    LocalSandboxProvider::with_prober(config, prober).expect("valid config")
}

fn main() {
    let iterations: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(300);
    let dir = tempfile::Builder::new().prefix("dsh-sbx-bench-").tempdir_in("/var/tmp").expect("scratch dir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical scratch dir");
    let policy = SandboxExecutionPolicy::new(SandboxMode::WorkspaceWrite, root.clone(), None);

    let (r1, r2) = (root.clone(), root.clone());
    let mut variants: Vec<Variant> = vec![
        ("unconfined bash -c true", Box::new(move || spawn_plain(&r1, false))),
        ("unconfined, no-op pre_exec (fork)", Box::new(move || spawn_plain(&r2, true))),
    ];
    let usable = |kind| matches!(SystemProber.probe(kind, Duration::from_secs(10)), ProbeOutcome::Usable(_));
    if usable(RunnerKind::Landlock) {
        let full = provider(RunnerKind::Landlock, Arc::new(SystemProber));
        let only = provider(RunnerKind::Landlock, Arc::new(LandlockOnly));
        let (p1, p2) = (policy.clone(), policy.clone());
        variants.push(("landlock + mount ns (default)", Box::new(move || spawn_confined(&full, &p1))));
        variants.push(("landlock alone (partial)", Box::new(move || spawn_confined(&only, &p2))));
        let conf = provider(RunnerKind::Landlock, Arc::new(SystemProber));
        let p3 = policy.clone();
        variants.push((
            "confine() alone (landlock)",
            Box::new(move || {
                conf.confine(&["bash".to_owned(), "-c".to_owned(), "true".to_owned()], &p3).expect("confine");
            }),
        ));
    } else {
        println!("landlock: unusable, skipped");
    }
    if usable(RunnerKind::Bwrap) {
        let bwrap = provider(RunnerKind::Bwrap, Arc::new(SystemProber));
        let p = policy.clone();
        variants.push(("bwrap", Box::new(move || spawn_confined(&bwrap, &p))));
    } else {
        println!("bwrap: unusable, skipped");
    }

    // Warm up, then interleave the variants so drift on a shared machine hits all alike.
    for (_, run) in &variants {
        for _ in 0..10 {
            run();
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(iterations); variants.len()];
    let mut cpu = vec![Duration::ZERO; variants.len()];
    for _ in 0..iterations {
        for (i, (_, run)) in variants.iter().enumerate() {
            let (start, cpu_start) = (Instant::now(), cpu_time());
            run();
            samples[i].push(start.elapsed());
            cpu[i] += cpu_time().saturating_sub(cpu_start);
        }
    }
    let medians: Vec<Duration> = samples.into_iter().map(median).collect();
    let base = medians[0].as_secs_f64();
    let cpu_base = cpu[0].as_secs_f64();
    println!("{iterations} iterations each: median wall time, and mean CPU time (this process + children)");
    for (((name, _), m), c) in variants.iter().zip(&medians).zip(&cpu) {
        println!(
            "  {name:<34} {:>9.1} us {:>5.2}x   cpu {:>8.1} us {:>5.2}x",
            m.as_secs_f64() * 1e6,
            m.as_secs_f64() / base,
            c.as_secs_f64() * 1e6 / iterations as f64,
            c.as_secs_f64() / cpu_base
        );
    }
}
