//! A started composition: the context with every planned plugin loaded, plus what the host
//! adds on top (the approval answerer).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use dsh_approval::{APPROVAL_HUB, fixed_answerer, secret_file_answerer, tty_answerer};
use dsh_core::approval::APPROVAL_UNREACHABLE;
use dsh_core::{ApprovalOutcome, Context, Disposer, PluginStatus, TOOLS, ToolRegistry};

use crate::catalog::Catalog;
use crate::cli::{Approve, CompositionArgs};
use crate::plan::{ParsedRow, Plan};

/// Whether plugins left pending after loading are an error (`call`, `batch`, …) or a fact to
/// report (`doctor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// A plugin left pending fails the start, naming it and what it misses.
    Refuse,
    /// Pending plugins are kept and reported (`doctor`).
    Report,
}

/// What a host adds to the composition it runs.
#[derive(Debug, Default)]
pub struct HostNeeds {
    /// Plugins the host itself needs (added when missing).
    pub plugins: &'static [&'static str],
    /// The host's own secret files: confined commands must not read them (they are masked
    /// by the local sandbox provider when it is composed).
    pub masked_paths: Vec<PathBuf>,
}

/// A loaded composition. Dispose it (awaited) before the process exits.
pub struct Composition {
    ctx: Context,
    answerers: Vec<Disposer>,
}

impl Composition {
    /// Plans, parses and loads the composition the command line describes.
    pub async fn start(args: &CompositionArgs, pending: Pending) -> anyhow::Result<Self> {
        Self::start_with(args, &HostNeeds::default(), pending).await
    }

    /// [`Composition::start`] with what the host itself needs.
    pub async fn start_with(
        args: &CompositionArgs,
        host: &HostNeeds,
        pending: Pending,
    ) -> anyhow::Result<Self> {
        let mut plan = Plan::from_args(&Catalog::builtin(), args, host.plugins)?;
        plan.mask_paths(&host.masked_paths)?;
        // The scripted secret is the harness's, not the commands'.
        if let Some(file) = &args.askpass_answer_file {
            plan.mask_paths(&[dsh_core::home::absolutize(file)])?;
        }
        Self::load(plan.parse()?, args, pending).await
    }

    async fn load(rows: Vec<ParsedRow>, args: &CompositionArgs, pending: Pending) -> anyhow::Result<Self> {
        let approve = args.approve;
        let ctx = Context::new();
        for row in rows {
            if let Err(e) = ctx.load_erased(row.factory, row.config) {
                ctx.dispose().await;
                return Err(e.into());
            }
        }
        let stuck = pending_plugins(&ctx.plugins());
        if pending == Pending::Refuse && !stuck.is_empty() {
            ctx.dispose().await;
            bail!("plugins stayed pending: {stuck}");
        }
        let hub = ctx.get(APPROVAL_HUB);
        let mut answerers = Vec::new();
        if let Some(answer) = approve {
            match &hub {
                Some(hub) => answerers.push(hub.register_answerer(None, answerer_for(answer), false)),
                None if pending == Pending::Report => {}
                None => {
                    ctx.dispose().await;
                    bail!("--approve needs the approval service, which did not start");
                }
            }
        }
        // First in the waterfall: a scripted secret answers before any interactive channel.
        if let (Some(file), Some(hub)) = (&args.askpass_answer_file, &hub) {
            let file = dsh_core::home::absolutize(file);
            answerers.push(hub.register_secret_answerer(None, secret_file_answerer(file), true));
        }
        // The hosts register every answer channel they have: the `--approve` answer here, and
        // (in the MCP server) an elicitation answerer per session whose client can answer.
        // Without any, no approval answer can come, and the tools may be told so: through the
        // hub when there is one, else as the composition's own fact.
        match &hub {
            Some(hub) => hub.answerers_are_exhaustive(),
            None if approve.is_none() => {
                if let Err(e) = ctx.provide(APPROVAL_UNREACHABLE, true) {
                    ctx.dispose().await;
                    return Err(e.into());
                }
            }
            None => {}
        }
        Ok(Self { ctx, answerers })
    }

    /// The loaded context.
    pub fn ctx(&self) -> &Context {
        &self.ctx
    }

    /// The tool registry; a composition without one cannot make calls.
    pub fn tools(&self) -> anyhow::Result<Arc<ToolRegistry>> {
        match self.ctx.get(TOOLS) {
            Some(tools) => Ok(tools),
            None => bail!("the composition has no tool registry (add \"tools\" to its plugins)"),
        }
    }

    /// Hands the context to a host that disposes it itself (the MCP server). The answerer
    /// registration goes with the approval service.
    pub fn into_context(self) -> Context {
        self.ctx
    }

    /// Tears everything down in reverse load order, awaiting processes and jobs.
    pub async fn dispose(self) {
        for answerer in self.answerers {
            answerer.dispose().await;
        }
        self.ctx.dispose().await;
    }
}

fn answerer_for(answer: Approve) -> dsh_approval::AnswerFn {
    match answer {
        Approve::AllowedOnce => fixed_answerer(ApprovalOutcome::AllowedOnce),
        Approve::Rejected => fixed_answerer(ApprovalOutcome::Rejected),
        Approve::Cancelled => fixed_answerer(ApprovalOutcome::Cancelled),
        Approve::Unavailable => fixed_answerer(ApprovalOutcome::Unavailable),
        Approve::Tty => tty_answerer(),
    }
}

/// `tool-bash (missing "shell", "shellEnv"); …` for every plugin not applied; empty when none.
pub fn pending_plugins(plugins: &[PluginStatus]) -> String {
    plugins
        .iter()
        .filter(|p| !p.applied)
        .map(|p| {
            let missing = p.missing.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(", ");
            format!("{} (missing {missing})", p.short_name)
        })
        .collect::<Vec<_>>()
        .join("; ")
}
