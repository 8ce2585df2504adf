//! The library entry point: the `bash` tool and its services, composed in a few lines.
//!
//! [`Harness`] starts the same composition `dsh-bash` runs (the default plugins, or a
//! sandboxed set, or a TOML file), makes tool calls as a model would, and tears everything
//! down (processes and jobs killed and awaited) on [`Harness::dispose`].
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread")]
//! # async fn main() -> anyhow::Result<()> {
//! use dsh_bash::Harness;
//! use serde_json::json;
//!
//! let workspace = tempfile::tempdir()?;
//! let harness = Harness::builder().workspace_root(workspace.path()).start().await?;
//!
//! // A call without a session: the model-facing text, exactly.
//! let result = harness.call(None, "bash", json!({"command": "echo hello", "description": "Say hello"})).await?;
//! assert_eq!(result.text(), "hello\n");
//! assert!(!result.result.is_error);
//!
//! // The schemas and the system prompt a model is given.
//! assert!(harness.schemas().iter().any(|tool| tool.name == "bash"));
//! assert!(harness.prompt().contains("[exit code: N]"));
//!
//! harness.dispose().await;
//! # Ok(())
//! # }
//! ```
//!
//! Sessions keep a working directory, background jobs and a log (under `$DSH_HOME`): name
//! one per conversation with `call(Some((id, cwd)), …)`. A sandboxed harness confines every
//! command (Linux: Landlock, or bubblewrap; this example needs one of them) and asks the
//! configured answer before a one-shot escalation:
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread")]
//! # async fn main() -> anyhow::Result<()> {
//! use dsh_bash::{Approve, Harness, SandboxMode};
//! use serde_json::json;
//!
//! let workspace = tempfile::tempdir_in(std::env::current_dir()?)?;
//! let harness = Harness::builder()
//!     .sandbox(SandboxMode::ReadOnly)
//!     .workspace_root(workspace.path())
//!     .approve(Approve::Rejected)
//!     .start()
//!     .await?;
//! let write = json!({"command": "touch made-here", "description": "Write in the workspace"});
//! let denied = harness.call(None, "bash", write).await?;
//! assert!(denied.text().contains("[sandbox: file access denied under read-only mode]"), "{}", denied.text());
//! assert!(!workspace.path().join("made-here").exists());
//! harness.dispose().await;
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};

use dsh_core::{AbortSignal, Context, SYSTEM_PROMPT, ToolSchema};
use serde_json::Value;
use tokio::sync::Mutex;

pub use crate::cli::Approve;
pub use crate::request::CallOutcome;
pub use dsh_sandbox::SandboxMode;

use crate::cli::CompositionArgs;
use crate::composition::{Composition, Pending};
use crate::sessions::Sessions;

/// A started composition that makes tool calls. Dispose it (awaited) when done.
pub struct Harness {
    composition: Composition,
    sessions: Mutex<Sessions>,
}

/// How a [`Harness`] is composed; [`Harness::builder`] starts one with the defaults.
#[derive(Clone, Debug, Default)]
pub struct HarnessBuilder {
    args: CompositionArgs,
}

impl HarnessBuilder {
    /// Confine commands: the sandboxing executor with this default mode.
    pub fn sandbox(mut self, mode: SandboxMode) -> Self {
        self.args.sandbox = Some(mode.as_str().to_owned());
        self
    }

    /// The working directory of calls whose session names none (and the sandbox's fallback
    /// workspace root).
    pub fn workspace_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.args.workspace_root = Some(dir.into());
        self
    }

    /// A TOML composition file, as `dsh-bash --config` reads it.
    pub fn config_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.args.config = Some(file.into());
        self
    }

    /// Answer every approval request this way (escalations included).
    pub fn approve(mut self, answer: Approve) -> Self {
        self.args.approve = Some(answer);
        self
    }

    /// Leave `run_in_background` out of the `bash` tool.
    pub fn no_background(mut self) -> Self {
        self.args.no_background = true;
        self
    }

    /// Loads every plugin; fails when one stays pending or a configuration is invalid.
    pub async fn start(self) -> anyhow::Result<Harness> {
        let composition = Composition::start(&self.args, Pending::Refuse).await?;
        Ok(Harness { composition, sessions: Mutex::new(Sessions::default()) })
    }
}

impl Harness {
    /// A builder with the default composition.
    pub fn builder() -> HarnessBuilder {
        HarnessBuilder::default()
    }

    /// Makes one call of `tool` with `args`, as the agent of `session` (id and working
    /// directory; created on first use, its cwd fixed then) or without an agent. A tool
    /// error is a result with `is_error`; `Err` is a failure of the harness itself (unknown
    /// session cwd, a log that cannot record the turn).
    pub async fn call(
        &self,
        session: Option<(&str, &Path)>,
        tool: &str,
        args: Value,
    ) -> anyhow::Result<CallOutcome> {
        self.call_with_signal(session, tool, args, AbortSignal::new()).await
    }

    /// [`Harness::call`] with a signal that aborts the call (its command is killed).
    pub async fn call_with_signal(
        &self,
        session: Option<(&str, &Path)>,
        tool: &str,
        args: Value,
        signal: AbortSignal,
    ) -> anyhow::Result<CallOutcome> {
        let tools = self.composition.tools()?;
        let agent = match session {
            Some((id, cwd)) => Some(self.sessions.lock().await.open(self.context(), id, Some(cwd))?),
            None => None,
        };
        Ok(crate::request::call(&tools, tool, args, agent, signal).await?)
    }

    /// The tool schemas a model is given (name, description, parameters).
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.composition.tools().map(|tools| tools.schemas()).unwrap_or_default()
    }

    /// The assembled system prompt.
    pub fn prompt(&self) -> String {
        self.context().get(SYSTEM_PROMPT).map(|prompt| prompt.render()).unwrap_or_default()
    }

    /// The composition's context: every service, for what the facade does not cover.
    pub fn context(&self) -> &Context {
        self.composition.ctx()
    }

    /// Tears everything down in reverse load order, awaiting processes and jobs.
    pub async fn dispose(self) {
        self.composition.dispose().await;
    }
}
