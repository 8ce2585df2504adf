//! One-shot sandbox escalation through the approval seam. Every refusal is a
//! tool error and nothing runs on any path but a grant.

use std::sync::Arc;

use dsh_core::approval::APPROVAL_UNREACHABLE;
use dsh_core::{APPROVAL, Agent, ApprovalRequest, ApprovalService, ToolError, ToolExec, WeakContext};
use dsh_sandbox::{
    EscalationError, SandboxMode, StandingPolicy, check_widening, escalation_reason, map_escalation_outcome,
};

use crate::args::EscalationRequest;

fn plain(e: EscalationError) -> ToolError {
    ToolError::plain(e.to_string())
}

/// Resolves an escalation to the granted mode.
///
/// `standing` is `None` in a non-sandboxing composition (no targets advertised). The approval
/// service is looked up by the caller at call time and passed as `approval`.
pub(crate) async fn approve(
    request: &EscalationRequest,
    standing: Option<&StandingPolicy>,
    approval: Option<Arc<dyn ApprovalService>>,
    exec: &ToolExec,
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
}

impl dsh_sandbox::NetworkApprover for CallNetworkApprover {
    fn approve(&self, host_port: String) -> dsh_sandbox::NetworkApprovalFuture {
        let request = ApprovalRequest {
            agent: self.agent.clone(),
            tool_name: "bash".to_owned(),
            call_id: Some(self.call_id.clone()),
            reason: Some(dsh_sandbox::network_reason(&host_port)),
            signal: Some(self.signal.clone()),
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
/// and the call has an agent to ask for.
pub(crate) fn network_approver(ctx: &WeakContext, exec: &ToolExec) -> Option<dsh_shell::NetworkApproverSlot> {
    let approval = approval_service(ctx)?;
    let agent = exec.agent.clone()?;
    Some(dsh_shell::NetworkApproverSlot(Arc::new(CallNetworkApprover {
        approval,
        agent,
        call_id: exec.call_id.clone(),
        signal: exec.signal.clone(),
    })))
}
