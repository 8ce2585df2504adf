//! The model-facing `bash` tool (a **consumer** of the shell seam).
//!
//! Registers the tool `bash` and the `tool:bash` prompt section over whatever executor
//! provides `shell`. Foreground execution stays behind that seam; a background process is
//! published to the generic `jobs` runtime (looked up at call time) and controlled through
//! the job tools. Every call receives a freshly collected managed `DSH_*` environment from the
//! `shellEnv` registry. Escalation to a wider sandbox mode goes through the `approval` seam
//! (looked up at call time) when the mounted executor sandboxes, which also makes the
//! `sandboxPolicy` service a load-time requirement. With the `askpass` service composed
//! (looked up at call time), a foreground command gets the askpass variables, and the secrets
//! it asks for are questions of the approval service (see `dsh-askpass`).
//!
//! Service names: the seed calls the injected executor and env registry `bash` and `bashEnv`;
//! this crate injects them under the keys `shell` and `shellEnv`
//! (`INJECT = ["tools", "shell", "systemPrompt", "shellEnv"]`).
//!
//! The crate root exposes only the plugin surface — [`NAME`], [`INJECT`], [`Config`]
//! and the [`ToolBash`] plugin type. Rendering, presenters and the background
//! adaptation are internal. It knows nothing about how commands are spawned or confined,
//! which executor is mounted, or which host carries the tool.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod args;
mod askpass;
mod background;
mod escalation;
mod persist;
mod present;
mod render;
mod texts;
mod tool;
mod value;
mod workdir;

use std::sync::Arc;

use dsh_core::services::{SystemPrompt, Tools};
use dsh_core::{ConfigError, Deps, Handles, Plugin, PluginError, PluginScope};
use dsh_sandbox::SANDBOX_POLICY;
use dsh_shell::services::{Shell, ShellEnv};
use schemars::JsonSchema;
use serde::Deserialize;

pub use persist::Persist;

/// The package name.
pub const NAME: &str = "@deepseek-ai/dsh-tool-bash";

/// The services that must exist before the plugin applies.
pub const INJECT: &[&str] = <<ToolBash as Plugin>::Deps as Deps>::NAMES;

const SHORT_NAME: &str = "tool-bash";

const POLICY_MISSING: &str = "tool-bash: the mounted bash executor confines but ctx.sandboxPolicy is missing";

/// Configuration of the bash tool.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// Advertise `run_in_background` and accept background calls (default `true`). When
    /// `false` the parameter is removed and a forced background call is rejected.
    pub enable_run_in_background: bool,
    /// What carries over from one call of a session to the next (default `none`): `cwd`, the
    /// directory the command's shell ended in; `env`, that and the exported variables and
    /// shell functions. When on, the tool also takes `reset: true` (start this call from the
    /// session's starting state) and its description says what carries.
    pub persist: Persist,
    /// Advertise `tty` (with `run_in_background`) and run a background call that sets it on a
    /// pseudo-terminal (default `false`: the parameter is absent and a `tty` key is ignored).
    /// Meant together with job input (`[tool-jobs] input`), which types into the terminal.
    pub tty: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self { enable_run_in_background: true, persist: Persist::None, tty: false }
    }
}

/// The plugin, for compositions that load plugins by type.
///
/// Registers the `tool:bash` section and the `bash` tool; both are disposed when the plugin
/// (or an injected service) unloads. Fails with `tool-bash: the mounted bash executor
/// confines but ctx.sandboxPolicy is missing` when the executor sandboxes and no sandbox
/// policy service is composed.
pub struct ToolBash;

impl Plugin for ToolBash {
    const NAME: &'static str = NAME;
    const SHORT_NAME: &'static str = SHORT_NAME;
    type Deps = (Tools, Shell, SystemPrompt, ShellEnv);
    type Config = Config;
    type Validated = Config;

    fn validate(config: Config) -> Result<Config, ConfigError> {
        Ok(config)
    }

    fn apply(
        scope: &mut PluginScope,
        (tools, shell, prompt, env): Handles<Self>,
        config: &Config,
    ) -> Result<(), PluginError> {
        // The executor's capability fact, read once at load: any defined mode (even
        // danger-full-access) means a sandboxing composition, which also needs the policy
        // service (a dependency only then, so it is looked up rather than declared).
        let policy = match shell.sandbox_mode() {
            None => None,
            Some(_) => {
                Some(scope.get(SANDBOX_POLICY).ok_or_else(|| PluginError::Apply(POLICY_MISSING.into()))?)
            }
        };
        let section =
            prompt.register_section(texts::SECTION_NAME, texts::SECTION_ORDER, texts::SECTION_TEXT)?;
        scope.add(section);
        let tool = tool::BashTool::new(
            shell,
            env,
            policy,
            scope.ctx().downgrade(),
            config.enable_run_in_background,
            config.persist,
            config.tty,
        );
        let registration = tools.register(Arc::new(tool))?;
        scope.add(registration);
        Ok(())
    }
}
