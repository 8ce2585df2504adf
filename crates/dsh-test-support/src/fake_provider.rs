//! A sandbox provider that confines nothing: it returns the argv unchanged (optionally behind
//! a runner program, or refuses as unavailable) and records every `confine`.

use dsh_sandbox::{
    ConfinedCommand, ProviderReport, RunnerFailureRule, SandboxEnforcement, SandboxExecutionPolicy,
    SandboxProvider, SandboxUnavailableError,
};
use parking_lot::Mutex;

/// Returns the argv unchanged, recording every `(argv, policy)` it is asked to confine.
#[derive(Default)]
pub struct FakeProvider {
    /// Every confine, in order.
    pub seen: Mutex<Vec<(Vec<String>, SandboxExecutionPolicy)>>,
    /// Prefix the argv with this runner program (e.g. a missing one).
    pub runner: Option<String>,
    /// Refuse every confine as unavailable (after recording it).
    pub unavailable: bool,
}

impl FakeProvider {
    /// Prefixes every argv with `runner`.
    pub fn with_runner(runner: Option<&str>) -> Self {
        Self { runner: runner.map(str::to_owned), ..Self::default() }
    }

    /// Refuses every confine when `unavailable`.
    pub fn unavailable(unavailable: bool) -> Self {
        Self { unavailable, ..Self::default() }
    }

    /// The policies of every confine, in order.
    pub fn policies(&self) -> Vec<SandboxExecutionPolicy> {
        self.seen.lock().iter().map(|(_, policy)| policy.clone()).collect()
    }
}

impl SandboxProvider for FakeProvider {
    fn confine(
        &self,
        argv: &[String],
        policy: &SandboxExecutionPolicy,
    ) -> Result<ConfinedCommand, SandboxUnavailableError> {
        self.seen.lock().push((argv.to_vec(), policy.clone()));
        if self.unavailable {
            return Err(SandboxUnavailableError::new(policy.mode));
        }
        let mut wrapped = argv.to_vec();
        if let Some(runner) = &self.runner {
            wrapped.insert(0, runner.clone());
        }
        Ok(ConfinedCommand {
            argv: wrapped,
            child_confinement: None,
            enforcement: SandboxEnforcement::Full,
            denial_signatures: vec!["read-only file system".into(), "permission denied".into()],
            runner_failure_rules: vec![RunnerFailureRule::fatal(&["fake-runner: "])],
            runner: self.runner.clone(),
            proxy: None,
        })
    }

    fn describe(&self) -> ProviderReport {
        ProviderReport { provider: "fake".into(), selected: Some("fake".into()), runners: Vec::new() }
    }
}
