//! A provider's self-description, for a `doctor` command.

use std::fmt;

use serde::Serialize;

use crate::mode::SandboxEnforcement;

/// What a sandbox provider can do on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderReport {
    /// The provider's name (`sandbox-local`).
    pub provider: String,
    /// The runner that confines commands, `None` when no backend is usable.
    pub selected: Option<String>,
    /// Every runner the provider knows, in chain order.
    pub runners: Vec<RunnerReport>,
}

/// One runner's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerReport {
    /// `landlock`, `bwrap`, `runnerCommand`.
    pub name: String,
    /// Whether the runner can confine on this host.
    pub usable: bool,
    /// Present when usable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<SandboxEnforcement>,
    /// What the host offers, e.g. `Landlock ABI 7` or `bubblewrap 0.8.0`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why it is unusable or partial, and other facts worth a line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ProviderReport {
    /// The selected runner's report, if any.
    pub fn selected_runner(&self) -> Option<&RunnerReport> {
        let selected = self.selected.as_deref()?;
        self.runners.iter().find(|r| r.name == selected)
    }
}

impl fmt::Display for ProviderReport {
    /// Plain text, one runner per line with indented notes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "sandbox provider: {}", self.provider)?;
        match self.selected_runner() {
            Some(r) => match r.enforcement {
                Some(e) => writeln!(f, "selected runner: {} (enforcement {})", r.name, e.as_str())?,
                None => writeln!(f, "selected runner: {}", r.name)?,
            },
            None => writeln!(f, "selected runner: none (confined commands are refused)")?,
        }
        for r in &self.runners {
            write!(f, "  {}: {}", r.name, if r.usable { "usable" } else { "unusable" })?;
            if let Some(e) = r.enforcement {
                write!(f, ", enforcement {}", e.as_str())?;
            }
            if let Some(v) = &r.version {
                write!(f, ", {v}")?;
            }
            writeln!(f)?;
            for note in &r.notes {
                writeln!(f, "    - {note}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_runners_and_notes() {
        let report = ProviderReport {
            provider: "sandbox-local".into(),
            selected: Some("landlock".into()),
            runners: vec![
                RunnerReport {
                    name: "landlock".into(),
                    usable: true,
                    enforcement: Some(SandboxEnforcement::Full),
                    version: Some("Landlock ABI 7".into()),
                    notes: vec![],
                },
                RunnerReport {
                    name: "bwrap".into(),
                    usable: false,
                    enforcement: None,
                    version: None,
                    notes: vec!["bwrap not found on PATH".into()],
                },
            ],
        };
        assert_eq!(
            report.to_string(),
            "sandbox provider: sandbox-local\nselected runner: landlock (enforcement full)\n  landlock: usable, enforcement full, Landlock ABI 7\n  bwrap: unusable\n    - bwrap not found on PATH\n"
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap()["runners"][1],
            serde_json::json!({"name": "bwrap", "usable": false, "notes": ["bwrap not found on PATH"]})
        );
    }
}
