//! One-shot sandbox escalation through the approval seam. Every refusal is a
//! tool error and nothing runs on any path but a grant.

use std::sync::Arc;

use dsh_core::approval::APPROVAL_UNREACHABLE;
use dsh_core::{
    APPROVAL, Agent, ApprovalAsk, ApprovalRequest, ApprovalService, ApprovalSubject, ToolError, ToolExec,
    WeakContext,
};
use dsh_sandbox::{
    EscalationError, SandboxMode, StandingPolicy, check_widening, escalation_reason, map_escalation_outcome,
};

use crate::args::EscalationRequest;

fn plain(e: EscalationError) -> ToolError {
    ToolError::plain(e.to_string())
}

/// What the user is shown of the call an approval is about: the command as the model wrote it,
/// the directory it starts in, and what else decides what runs (one sentence each).
pub(crate) struct Shown {
    pub command: String,
    pub cwd: String,
    pub notes: Vec<String>,
}

/// Resolves an escalation to the granted mode.
///
/// `standing` is `None` in a non-sandboxing composition (no targets advertised). The approval
/// service is looked up by the caller at call time and passed as `approval`. The request
/// carries what `shown` says as its subject, with the mode asked for and the justification.
pub(crate) async fn approve(
    request: &EscalationRequest,
    standing: Option<&StandingPolicy>,
    approval: Option<Arc<dyn ApprovalService>>,
    exec: &ToolExec,
    shown: Shown,
) -> Result<SandboxMode, ToolError> {
    let Some(standing) = standing else {
        return Err(plain(EscalationError::NotAvailable));
    };
    // Strict widening is checked against the recorded spelling; nobody is prompted on failure.
    let requested = check_widening(&request.mode, &standing.mode_label).map_err(plain)?;
    let approval = approval.ok_or(EscalationError::NoApprovalService { requested }).map_err(plain)?;
    let agent = exec.agent.clone().ok_or(EscalationError::NoAgent { requested }).map_err(plain)?;
    let outcome = approval
        .request(ApprovalRequest {
            agent,
            tool_name: "bash".to_owned(),
            call_id: Some(exec.call_id.clone()),
            reason: Some(escalation_reason(requested, &request.justification)),
            signal: Some(exec.signal.clone()),
            subject: Some(ApprovalSubject {
                command: shown.command,
                cwd: shown.cwd,
                asked: ApprovalAsk::Mode(requested.as_str().to_owned()),
                justification: Some(request.justification.clone()),
                notes: shown.notes,
            }),
        })
        .await?;
    map_escalation_outcome(outcome, requested, "command").map_err(plain)
}

/// The approval service, looked up at call time (it may load after the tool).
pub(crate) fn approval_service(ctx: &WeakContext) -> Option<Arc<dyn ApprovalService>> {
    ctx.get(APPROVAL)
}

/// Whether a sandboxing composition offers escalation to the model after a denial (the
/// escalation hint is shown) for a call of `agent` (`None`: a call without an agent). It is
/// withheld only on an explicit fact that no approval answer can come: the host declared its
/// composition unreachable ([`APPROVAL_UNREACHABLE`]), or the composed approval service says
/// so ([`ApprovalService::can_answer`]). A retry with `sandbox_permissions` would then fail,
/// and suggesting it wastes a turn. Without either fact the hint stays, even with no approval
/// service composed: the retry then explains its own refusal.
pub(crate) fn offered_to(ctx: &WeakContext, agent: Option<&Agent>) -> bool {
    if ctx.get(APPROVAL_UNREACHABLE) == Some(true) {
        return false;
    }
    approval_service(ctx).is_none_or(|approval| approval.can_answer(agent))
}

/// Asks the approval service whether the call may reach a host (network policy `ask`).
struct CallNetworkApprover {
    approval: Arc<dyn ApprovalService>,
    agent: Arc<Agent>,
    call_id: String,
    signal: dsh_core::AbortSignal,
    /// The command as the model wrote it, and where it started.
    command: String,
    cwd: String,
}

impl dsh_sandbox::NetworkApprover for CallNetworkApprover {
    fn approve(&self, host_port: String) -> dsh_sandbox::NetworkApprovalFuture {
        let request = ApprovalRequest {
            agent: self.agent.clone(),
            tool_name: "bash".to_owned(),
            call_id: Some(self.call_id.clone()),
            reason: Some(dsh_sandbox::network_reason(&host_port)),
            signal: Some(self.signal.clone()),
            subject: Some(ApprovalSubject {
                command: self.command.clone(),
                cwd: self.cwd.clone(),
                asked: ApprovalAsk::Host(host_port),
                justification: None,
                notes: Vec::new(),
            }),
        };
        let approval = Arc::clone(&self.approval);
        Box::pin(async move {
            use dsh_core::ApprovalOutcome;
            use dsh_sandbox::NetworkApproval::{AllowedOnce, Refused};
            match approval.request(request).await {
                Ok(ApprovalOutcome::AllowedOnce) => AllowedOnce,
                Ok(ApprovalOutcome::Rejected) => Refused("the user rejected it".to_owned()),
                Ok(ApprovalOutcome::Cancelled) => Refused("the approval was cancelled".to_owned()),
                Ok(ApprovalOutcome::Unavailable) | Err(_) => Refused("no approval is available".to_owned()),
            }
        })
    }
}

/// The network approver of a foreground call: present when an approval service is composed
/// and the call has an agent to ask for. Its questions show `command` and `cwd`.
pub(crate) fn network_approver(
    ctx: &WeakContext,
    exec: &ToolExec,
    command: &str,
    cwd: &str,
) -> Option<dsh_shell::NetworkApproverSlot> {
    let approval = approval_service(ctx)?;
    let agent = exec.agent.clone()?;
    Some(dsh_shell::NetworkApproverSlot(Arc::new(CallNetworkApprover {
        approval,
        agent,
        call_id: exec.call_id.clone(),
        signal: exec.signal.clone(),
        command: command.to_owned(),
        cwd: cwd.to_owned(),
    })))
}
