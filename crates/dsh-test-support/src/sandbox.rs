//! Tests that need a real sandbox runner: skip with a printed reason on a host that cannot
//! run it, but fail where the runner is required.
//!
//! A runner is required when `DSH_SANDBOX_REQUIRE_RUNNERS` (comma-separated runner names,
//! e.g. `landlock,bwrap`) names it. When that variable is unset or empty and `CI=true`, every
//! runner is required: on CI a skip is a failure unless the variable narrows the set.

/// The variable naming the runners that must be usable.
pub const REQUIRE_RUNNERS_ENV: &str = "DSH_SANDBOX_REQUIRE_RUNNERS";

/// Which runners must be usable on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Required {
    /// None: an unusable runner is skipped.
    Nothing,
    /// Every runner (`CI=true` without `DSH_SANDBOX_REQUIRE_RUNNERS`).
    Everything,
    /// The runners `DSH_SANDBOX_REQUIRE_RUNNERS` names.
    Named(Vec<String>),
}

impl Required {
    /// Read from `DSH_SANDBOX_REQUIRE_RUNNERS` and `CI`.
    pub fn from_env() -> Self {
        Self::from_values(
            std::env::var(REQUIRE_RUNNERS_ENV).ok().as_deref(),
            std::env::var("CI").ok().as_deref(),
        )
    }

    /// From the values of `DSH_SANDBOX_REQUIRE_RUNNERS` and `CI`.
    pub fn from_values(runners: Option<&str>, ci: Option<&str>) -> Self {
        let named: Vec<String> = runners
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .collect();
        if !named.is_empty() {
            Self::Named(named)
        } else if ci.is_some_and(|ci| ci.trim().eq_ignore_ascii_case("true")) {
            Self::Everything
        } else {
            Self::Nothing
        }
    }

    /// Whether `runner` must be usable.
    pub fn runner(&self, runner: &str) -> bool {
        match self {
            Self::Nothing => false,
            Self::Everything => true,
            Self::Named(names) => names.iter().any(|n| n == runner),
        }
    }

    /// Whether some runner must be usable.
    pub fn any(&self) -> bool {
        *self != Self::Nothing
    }

    fn why(&self) -> String {
        match self {
            Self::Nothing => "nothing is required".to_owned(),
            Self::Everything => "CI=true requires every runner".to_owned(),
            Self::Named(names) => format!("{REQUIRE_RUNNERS_ENV}={}", names.join(",")),
        }
    }
}

/// Whether `runner` must be usable here (see the module docs).
pub fn runner_required(runner: &str) -> bool {
    Required::from_env().runner(runner)
}

/// Reports that `runner` is unusable for `reason`: fails the test when the runner is
/// required, else prints a skip line (past the output capture) and returns.
#[track_caller]
pub fn skip_runner(runner: &str, reason: &str) {
    let required = Required::from_env();
    assert!(
        !required.runner(runner),
        "runner {runner} is required ({}) but unusable: {reason}",
        required.why()
    );
    say(&format!("SKIP: runner {runner} is unusable: {reason}"));
}

/// Reports that no sandbox backend is usable, for `reason`: fails the test when any runner
/// is required, else prints a skip line and returns.
#[track_caller]
pub fn skip_sandbox(reason: &str) {
    let required = Required::from_env();
    assert!(
        !required.any(),
        "a sandbox runner is required ({}) but none is usable: {reason}",
        required.why()
    );
    say(&format!("SKIP: no sandbox runner is usable: {reason}"));
}

/// `Some(value)` when `probe` found the runner usable; otherwise [`skip_runner`] (which
/// fails when the runner is required) and `None`.
#[track_caller]
pub fn require_runner<T, E: std::fmt::Display>(runner: &str, probe: Result<T, E>) -> Option<T> {
    match probe {
        Ok(value) => Some(value),
        Err(reason) => {
            skip_runner(runner, &reason.to_string());
            None
        }
    }
}

/// `Some(value)` when some backend is usable; otherwise [`skip_sandbox`] (which fails when
/// any runner is required) and `None`.
#[track_caller]
pub fn require_sandbox<T, E: std::fmt::Display>(probe: Result<T, E>) -> Option<T> {
    match probe {
        Ok(value) => Some(value),
        Err(reason) => {
            skip_sandbox(&reason.to_string());
            None
        }
    }
}

/// `require_runner!("landlock", probe)` evaluates to the probe's `Ok` value, or returns from
/// the test after [`skip_runner`] (which fails when the runner is required).
#[macro_export]
macro_rules! require_runner {
    ($runner:expr, $probe:expr) => {
        match $crate::sandbox::require_runner($runner, $probe) {
            Some(value) => value,
            None => return,
        }
    };
}

/// `require_sandbox!(probe)`: as [`require_runner!`] for "some backend".
#[macro_export]
macro_rules! require_sandbox {
    ($probe:expr) => {
        match $crate::sandbox::require_sandbox($probe) {
            Some(value) => value,
            None => return,
        }
    };
}

/// Written past the test harness's output capture, so a skip is always visible.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::Required;

    #[test]
    fn named_runners_are_required_and_others_are_not() {
        let required = Required::from_values(Some(" landlock , bwrap"), None);
        assert_eq!(required, Required::Named(vec!["landlock".into(), "bwrap".into()]));
        assert!(required.runner("landlock") && required.runner("bwrap") && !required.runner("other"));
        assert!(required.any());
        let narrowed = Required::from_values(Some("landlock"), Some("true"));
        assert!(narrowed.runner("landlock") && !narrowed.runner("bwrap"), "the list narrows CI");
    }

    #[test]
    fn ci_requires_every_runner_unless_narrowed() {
        for runners in [None, Some(""), Some(" , ")] {
            let required = Required::from_values(runners, Some("true"));
            assert_eq!(required, Required::Everything, "{runners:?}");
            assert!(required.runner("bwrap") && required.any());
        }
        for ci in [None, Some("false"), Some("")] {
            let required = Required::from_values(None, ci);
            assert_eq!(required, Required::Nothing, "{ci:?}");
            assert!(!required.runner("landlock") && !required.any());
        }
    }
}
