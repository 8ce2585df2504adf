//! Every plugin this binary can compose, by package name and short name.

use std::sync::Arc;

use dsh_core::plugins::{AgentsPlugin, SessionJsonlPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{Factory, Plugin, PluginFactory};

use dsh_bash_local::BashLocalPlugin;
use dsh_subprocess::SubprocessPlugin;

/// The composition used when no file names its own `plugins` list (short names, load order).
pub const DEFAULT_COMPOSITION: &[&str] = &[
    "tools",
    "system-prompt",
    "agent",
    "session-jsonl",
    "subprocess",
    "bash-local",
    "shell-env",
    "jobs",
    "tool-jobs",
    "tool-bash",
];

/// The plugins a sandboxed composition adds next to the sandboxing executor.
pub const SANDBOX_PLUGINS: &[&str] = &[SANDBOX_PROVIDER, "sandbox-policy"];

/// The local sandbox provider (it masks the host's own secret files from confined commands).
pub const SANDBOX_PROVIDER: &str = "sandbox-local";

/// The executor a sandboxed composition replaces.
pub const LOCAL_EXECUTOR: &str = "bash-local";

/// The sandboxing executor that replaces [`LOCAL_EXECUTOR`] under `--sandbox`.
pub const SANDBOX_EXECUTOR: &str = "bash-sandbox";

/// The executor that replaces [`LOCAL_EXECUTOR`] under `--executor ssh`.
pub const SSH_EXECUTOR: &str = "shell-ssh";
/// The container executor that replaces [`LOCAL_EXECUTOR`] under `--executor container`.
pub const CONTAINER_EXECUTOR: &str = "shell-container";

/// The known plugins.
pub struct Catalog {
    entries: Vec<Arc<dyn PluginFactory>>,
}

fn entry<P: Plugin>() -> Arc<dyn PluginFactory> {
    Arc::new(Factory::<P>::new())
}

impl Catalog {
    /// Every plugin of the project that is part of this build.
    pub fn builtin() -> Self {
        Self {
            entries: vec![
                entry::<ToolsPlugin>(),
                entry::<SystemPromptPlugin>(),
                entry::<AgentsPlugin>(),
                entry::<SessionJsonlPlugin>(),
                entry::<SubprocessPlugin>(),
                entry::<BashLocalPlugin>(),
                entry::<dsh_shell::ShellEnvPlugin>(),
                entry::<dsh_jobs::JobsPlugin>(),
                entry::<dsh_tool_jobs::ToolJobsPlugin>(),
                entry::<dsh_tool_bash::ToolBash>(),
                entry::<dsh_bash_sandbox::BashSandboxPlugin>(),
                #[cfg(target_os = "linux")]
                entry::<dsh_sandbox_local::SandboxLocalPlugin>(),
                entry::<dsh_sandbox_policy::SandboxPolicyPlugin>(),
                entry::<dsh_approval::ApprovalPlugin>(),
                entry::<dsh_shell_ssh::ShellSshPlugin>(),
                entry::<dsh_shell_container::ShellContainerPlugin>(),
                entry::<dsh_askpass::AskpassPlugin>(),
            ],
        }
    }

    /// The plugin called `name` (package or short name).
    pub fn find(&self, name: &str) -> Option<Arc<dyn PluginFactory>> {
        self.entries.iter().find(|f| f.name() == name || f.short_name() == name).cloned()
    }

    /// Every plugin, in catalog order.
    pub fn entries(&self) -> &[Arc<dyn PluginFactory>] {
        &self.entries
    }

    /// Short names, comma-separated, for error messages.
    pub fn short_names(&self) -> String {
        self.entries.iter().map(|f| f.short_name()).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_composition_names_known_plugins() {
        let catalog = Catalog::builtin();
        for name in DEFAULT_COMPOSITION.iter().chain(SANDBOX_PLUGINS) {
            assert!(catalog.find(name).is_some(), "{name} is not in the catalog");
        }
    }

    #[test]
    fn names_are_unique() {
        let catalog = Catalog::builtin();
        for (i, a) in catalog.entries().iter().enumerate() {
            for b in &catalog.entries()[i + 1..] {
                assert_ne!(a.short_name(), b.short_name());
                assert_ne!(a.name(), b.name());
            }
        }
    }

    #[test]
    fn finds_by_package_or_short_name() {
        let catalog = Catalog::builtin();
        let by_short = catalog.find("tools").expect("tools");
        let by_package = catalog.find("@deepseek-ai/dsh-tools").expect("tools");
        assert_eq!(by_short.name(), by_package.name());
        assert!(catalog.find("nope").is_none());
    }
}
