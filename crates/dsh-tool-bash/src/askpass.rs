//! Secrets a foreground command asks the user for (askpass), when the composition has the
//! askpass service: the command gets the askpass variables, and each prompt becomes a
//! secret-input question of the approval service for the call's agent.

use std::sync::Arc;

use dsh_askpass::{ASKPASS, AskpassCall, SecretAsker};
use dsh_core::WeakContext;
use dsh_core::{
    AbortSignal, Agent, ApprovalService, Secret, SecretReply, SecretRequest, ToolError, ToolExec,
};
use dsh_shell::ShellExecRequest;
use futures::future::BoxFuture;

/// Asks the approval service on behalf of one call; without a service or an agent nobody
/// can answer, and every prompt gets nothing.
struct CallSecretAsker {
    approval: Option<Arc<dyn ApprovalService>>,
    agent: Option<Arc<Agent>>,
    call_id: String,
    signal: AbortSignal,
}

impl SecretAsker for CallSecretAsker {
    fn ask(&self, prompt: String) -> BoxFuture<'static, Result<Secret, Option<String>>> {
        let (Some(approval), Some(agent)) = (self.approval.clone(), self.agent.clone()) else {
            return Box::pin(async { Err(None) });
        };
        let request = SecretRequest {
            agent,
            tool_name: "bash".to_owned(),
            call_id: Some(self.call_id.clone()),
            prompt,
            signal: Some(self.signal.clone()),
        };
        Box::pin(async move {
            match approval.request_secret(request).await {
                Ok(SecretReply::Given(secret)) => Ok(secret),
                Ok(SecretReply::Refused(_)) => Err(None),
                Ok(SecretReply::Unanswerable(why)) => Err(Some(why)),
                Err(e) => {
                    tracing::warn!(error = %e, "askpass question not asked");
                    Err(None)
                }
            }
        })
    }
}

/// Opens the call's askpass socket and adds its variables to `request`'s environment; the
/// socket is served while the returned guard lives. `None` when askpass is not composed.
pub(crate) fn open(
    ctx: &WeakContext,
    exec: &ToolExec,
    request: &mut ShellExecRequest,
) -> Result<Option<AskpassCall>, ToolError> {
    let Some(service) = ctx.get(ASKPASS) else { return Ok(None) };
    let asker = CallSecretAsker {
        approval: crate::escalation::approval_service(ctx),
        agent: exec.agent.clone(),
        call_id: exec.call_id.clone(),
        signal: exec.signal.clone(),
    };
    let session = exec.agent.as_ref().map(|agent| agent.session().id().to_owned());
    let call = service
        .open_in_session(session.as_deref(), Arc::new(asker))
        .map_err(|e| ToolError::plain(format!("cannot open the askpass socket: {e}")))?;
    let env = request.dsh_env.get_or_insert_with(Default::default);
    env.extend(call.env().iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(Some(call))
}
