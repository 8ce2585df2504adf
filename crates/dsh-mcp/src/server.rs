//! The MCP server handler: the composition's tools, results and progress, per session.

// Logging and roots are deprecated by SEP-2577 (the 2026-07-28 revision); this server also
// speaks the revisions with `initialize`, where they are current and the only channels for
// notices and cwd.
#![allow(deprecated)]

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dsh_core::tools::OutputProbeSlot;
use dsh_core::{
    AbortReason, AbortSignal, AgentMessage, HARNESS_IDENTITY_SECTION, PERSONA_SECTION, SYSTEM_PROMPT, TOOLS,
    ToolError, ToolExec, ToolResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use tokio::time::MissedTickBehavior;

use crate::order::{CallBook, CallTicket, SessionLink};
use crate::output::{OutputShape, advertised_output_schema, call_tool_result, output_shape};
use crate::rounds::{Rounds, declared_modes};
use crate::session::{McpSession, SESSION_ENDED, Shared};

/// The newest protocol revision served over the `initialize` handshake (the answer to an
/// `initialize` asking for a newer one).
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The newest protocol revision served: 2026-07-28, without `initialize` (each request
/// carries its revision, client and capabilities in `_meta`).
pub const NEWEST_PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// Where the session of a 2026-07-28 client lives (that revision has no protocol session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Home {
    /// The connection is the session (stdio): made by its first request.
    Connection,
    /// The HTTP principal (the bearer token's holder) has one session, shared by every
    /// 2026-07-28 request over HTTP.
    Principal,
}

/// The reason a client's `notifications/cancelled` aborts a call with.
pub const CLIENT_CANCELLED: &str = "cancelled by the MCP client";

/// The session slot a server instance fills at `initialize`; shared with the transport so it
/// can end the session when the connection goes away.
pub(crate) type SessionSlot = Arc<OnceLock<Arc<McpSession>>>;

/// One server instance serves one MCP session.
pub(crate) struct McpServer {
    shared: Arc<Shared>,
    session: SessionSlot,
    home: Home,
}

impl McpServer {
    pub fn new(shared: Arc<Shared>, home: Home) -> Self {
        Self { shared, session: Arc::new(OnceLock::new()), home }
    }

    pub fn session_slot(&self) -> SessionSlot {
        Arc::clone(&self.session)
    }

    /// The request's session: the one `initialize` made, else (a 2026-07-28 request) the
    /// connection's or the HTTP principal's, made by its first request.
    fn session(&self, context: &RequestContext<RoleServer>) -> Result<Arc<McpSession>, McpError> {
        if let Some(session) = self.session.get() {
            return Ok(Arc::clone(session));
        }
        let revision = context.meta.protocol_version().filter(|version| !version.has_initialize());
        let Some(revision) = revision else {
            return Err(McpError::invalid_request("the session is not initialized", None));
        };
        let answerable = declared_modes(context).contains(&rmcp::service::ElicitationMode::Form);
        if self.home == Home::Principal {
            return Ok(self.shared.principal(revision, answerable));
        }
        let link = context.extensions.get::<Arc<SessionLink>>().cloned();
        let mut made = false;
        let session = self.session.get_or_init(|| {
            made = true;
            let book = link.as_ref().map(|link| link.book().clone()).unwrap_or_default();
            McpSession::inline(Arc::clone(&self.shared), revision, answerable, book)
        });
        if made {
            self.shared.track(session);
            if let Some(link) = link {
                link.bind(session);
            }
        }
        Ok(Arc::clone(session))
    }
}

impl Drop for McpServer {
    /// The last handle of an HTTP session goes when its connection is closed: end the
    /// composition session with it.
    fn drop(&mut self) {
        if let Some(session) = self.session.get().cloned()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { session.close().await });
        }
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_logging().build();
        let mut info = InitializeResult::new(capabilities);
        info.protocol_version = PROTOCOL_VERSION;
        info.server_info =
            Implementation::new(&self.shared.options.server_name, &self.shared.options.server_version);
        let excluded: &[&str] = if self.shared.options.instructions_with_identity {
            &[]
        } else {
            &[HARNESS_IDENTITY_SECTION, PERSONA_SECTION]
        };
        let mut instructions =
            self.shared.ctx.get(SYSTEM_PROMPT).map(|p| p.render_excluding(excluded)).unwrap_or_default();
        if let Some(standing) = &self.shared.options.instructions_standing {
            if !instructions.is_empty() {
                instructions.push_str("\n\n");
            }
            instructions.push_str(standing);
        }
        if !instructions.is_empty() {
            info.instructions = Some(instructions);
        }
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL_VERSION))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        if self.session.get().is_none() {
            // The transport's link (see `crate::order`): the session shares its call book, and
            // whoever ends the session through the link tears it down.
            let link = context.extensions.get::<Arc<SessionLink>>().cloned();
            let book = link.as_ref().map(|link| link.book().clone()).unwrap_or_else(CallBook::default);
            let revision = result.protocol_version.clone();
            let session = McpSession::new(Arc::clone(&self.shared), context.peer.clone(), revision, book);
            if self.session.set(Arc::clone(&session)).is_ok() {
                self.shared.track(&session);
                if let Some(link) = link {
                    link.bind(&session);
                }
            }
        }
        Ok(result)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session(&context)?.set_log_level(request.level);
        Ok(())
    }

    /// No prompts: an empty list, not an error (clients such as the Python SDK ask whatever
    /// the capabilities say, and an error answer is logged as a failure on both sides).
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(Vec::new()))
    }

    /// No resources: an empty list (see `list_prompts`).
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(Vec::new()))
    }

    /// No resource templates: an empty list (see `list_prompts`).
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(Vec::new()))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let Some(registry) = self.shared.ctx.get(TOOLS) else {
            return Ok(ListToolsResult::with_all_items(Vec::new()));
        };
        let tools = registry
            .schemas()
            .into_iter()
            .map(|schema| {
                let input = match schema.parameters {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                let mut tool = Tool::new(schema.name.clone(), schema.description, Arc::new(input));
                if let Some(definition) = registry.get(&schema.name) {
                    tool = tool.with_raw_output_schema(Arc::new(advertised_output_schema(
                        definition.output_schema(),
                    )));
                }
                tool
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Numbered as it arrived (see `crate::order`); however this call ends, the next
        // one's turn comes when it does.
        let ticket = context.extensions.get::<CallTicket>().cloned();
        let session = self.session(&context)?;
        if session.is_inline() {
            return self.call_tool_inline(session, ticket, request, context).await;
        }
        let ticket = ticket.unwrap_or_else(|| session.book().issue(context.id.clone()));
        let _finish = FinishCall(&ticket);
        let registry = self
            .shared
            .ctx
            .get(TOOLS)
            .ok_or_else(|| McpError::internal_error("no tool registry is composed", None))?;
        let agent = session.agent().await.map_err(|e| McpError::invalid_request(e.to_string(), None))?;
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let shape =
            registry.get(&name).map(|t| output_shape(t.output_schema())).unwrap_or(OutputShape::Object);
        let signal = ticket.signal().clone();
        let ended = session.ended().clone();
        tokio::select! {
            biased;
            () = ended.cancelled() => return Ok(aborted_while_queued(shape)),
            () = ticket.turn() => {}
            () = signal.aborted() => return Ok(aborted_while_queued(shape)),
            () = context.ct.cancelled() => return Ok(aborted_while_queued(shape)),
        }
        let call_id = session.next_call_id();
        let guard = session.enter_call(&agent, &call_id, &name, &args);
        let exec = ToolExec::new(Some(Arc::clone(&agent)), call_id).with_signal(signal.clone());
        let output = exec.output_probe.clone();
        let call = registry.call(&name, args, exec);
        let progress = context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
            tool: name.clone(),
            started: Instant::now(),
            every: self.shared.options.effective_progress_interval(),
            output,
        });
        let result = run_call(call, &context, &signal, &ended, progress).await;
        session.note_spills(result.value.as_ref());
        let notices: Vec<AgentMessage> = agent.take_inbox().into_iter().map(|(_, message)| message).collect();
        drop(guard);
        Ok(call_tool_result(&result, shape, &notices).into())
    }
}

impl McpServer {
    /// A 2026-07-28 call. Its first round starts it in a task of its own, so that a question
    /// it asks can end the round (`input_required`) while the call runs on; a round carrying
    /// a `requestState` delivers its answers to the call it names and waits on (see
    /// [`crate::rounds`]). Order, cancellation and results are those of the older revisions.
    async fn call_tool_inline(
        &self,
        session: Arc<McpSession>,
        ticket: Option<CallTicket>,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let modes = declared_modes(&context);
        if let Some(state) = request.request_state.as_deref() {
            // The same call sent again: the transport's numbering of it is no call of its own.
            if let Some(ticket) = ticket {
                ticket.finish();
            }
            let call = session.rounds().resume(state, request.input_responses, modes).await?;
            return Ok(self.round(session.rounds(), &call, &context).await);
        }
        // Over HTTP, requests of several clients share the principal's session and may
        // reuse each other's ids: the call is numbered under an id of its own.
        let ticket = ticket.unwrap_or_else(|| {
            session
                .book()
                .issue(rmcp::model::RequestId::String(format!("dsh-{}", uuid::Uuid::new_v4()).into()))
        });
        let registry = self
            .shared
            .ctx
            .get(TOOLS)
            .ok_or_else(|| McpError::internal_error("no tool registry is composed", None))?;
        let agent = session.agent().await.map_err(|e| McpError::invalid_request(e.to_string(), None))?;
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let shape =
            registry.get(&name).map(|t| output_shape(t.output_schema())).unwrap_or(OutputShape::Object);
        let signal = ticket.signal().clone();
        let call_id = session.next_call_id();
        let exec = ToolExec::new(Some(Arc::clone(&agent)), call_id.clone()).with_signal(signal.clone());
        let (call, result_tx) =
            session.rounds().start(&call_id, &name, signal.clone(), modes, exec.output_probe.clone());
        let ended = session.ended().clone();
        let owner = Arc::clone(&session);
        tokio::spawn(async move {
            let result = async {
                tokio::select! {
                    biased;
                    () = ended.cancelled() => return aborted_result(shape),
                    () = ticket.turn() => {}
                    () = signal.aborted() => return aborted_result(shape),
                }
                let guard = owner.enter_call(&agent, &call_id, &name, &args);
                let call = registry.call(&name, args, exec);
                tokio::pin!(call);
                let result = tokio::select! {
                    result = &mut call => result,
                    () = ended.cancelled() => {
                        signal.abort(AbortReason::new(SESSION_ENDED));
                        call.await
                    }
                };
                owner.note_spills(result.value.as_ref());
                let notices: Vec<AgentMessage> =
                    agent.take_inbox().into_iter().map(|(_, message)| message).collect();
                drop(guard);
                call_tool_result(&result, shape, &notices)
            }
            .await;
            owner.rounds().ended(&call_id);
            ticket.finish();
            let _ = result_tx.send(result);
        });
        Ok(self.round(session.rounds(), &call, &context).await)
    }

    /// One round of a 2026-07-28 call, with progress on this round's own token.
    async fn round(
        &self,
        rounds: &Rounds,
        call: &Arc<crate::rounds::RoundCall>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let progress = context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
            tool: call.tool.clone(),
            started: call.started,
            every: self.shared.options.effective_progress_interval(),
            output: call.output.clone(),
        });
        let mut ticker = progress.as_ref().map(|p| {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + p.every, p.every);
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticker
        });
        let mut sending = None;
        let response = rounds
            .round(call, context, &mut ticker, || {
                if let Some(progress) = &progress {
                    progress.send(&mut sending);
                }
            })
            .await;
        // No progress may follow the response.
        if let Some(pending) = sending.take() {
            pending.abort();
            let _ = pending.await;
        }
        response
    }
}

/// The result of a call aborted before it ran.
fn aborted_result(shape: OutputShape) -> rmcp::model::CallToolResult {
    call_tool_result(&ToolResult::failure(ToolError::aborted_before_dispatch()), shape, &[])
}

/// Finishes a call's ticket however the handler ends.
struct FinishCall<'a>(&'a CallTicket);

impl Drop for FinishCall<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A call cancelled while queued never reaches the pipeline.
fn aborted_while_queued(shape: OutputShape) -> CallToolResponse {
    let result = ToolResult::failure(ToolError::aborted_before_dispatch());
    call_tool_result(&result, shape, &[]).into()
}

/// Progress reporting for one call: elapsed time, and the latest output line while the body
/// exposes one (a running foreground command does, through the call's output probe).
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    tool: String,
    started: Instant,
    every: Duration,
    /// The call's output-probe slot, asked once per tick.
    output: OutputProbeSlot,
}

/// `<tool>: running for <N>s`, then ` — <latest line>` when a line is known.
fn progress_message(tool: &str, seconds: u64, latest: Option<&str>) -> String {
    match latest {
        Some(line) => format!("{tool}: running for {seconds}s \u{2014} {line}"),
        None => format!("{tool}: running for {seconds}s"),
    }
}

impl Progress {
    /// Sends the current progress in a task of its own, unless the previous one is still on
    /// its way (a client that reads slowly): then this tick is dropped, so at most one
    /// notification per call waits for the client, and the call never waits for it.
    fn send(&self, pending: &mut Option<tokio::task::JoinHandle<()>>) {
        if pending.as_ref().is_some_and(|sending| !sending.is_finished()) {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        // One decimal keeps the value readable and strictly increasing between ticks.
        let progress = (elapsed * 10.0).round() / 10.0;
        let latest = self.output.latest_line();
        let message = progress_message(&self.tool, elapsed.round() as u64, latest.as_deref());
        let param = ProgressNotificationParam::new(self.token.clone(), progress).with_message(message);
        let peer = self.peer.clone();
        *pending = Some(tokio::spawn(async move {
            if let Err(error) = peer.notify_progress(param).await {
                tracing::debug!(%error, "could not send progress");
            }
        }));
    }
}

/// Drives one call to completion (a started body is never abandoned) while forwarding the
/// client's cancellation and the session's end to its abort signal and reporting progress
/// at a bounded rate.
async fn run_call<F>(
    call: F,
    context: &RequestContext<RoleServer>,
    signal: &AbortSignal,
    ended: &tokio_util::sync::CancellationToken,
    progress: Option<Progress>,
) -> ToolResult
where
    F: std::future::Future<Output = ToolResult>,
{
    tokio::pin!(call);
    let mut ticker = progress.as_ref().map(|p| {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + p.every, p.every);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker
    });
    let mut cancelled = false;
    let mut ending = false;
    let mut sending: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            result = &mut call => {
                // No progress may follow the response: a tick still on its way is either
                // queued already (before the response) or dropped now.
                if let Some(pending) = sending.take() {
                    pending.abort();
                    let _ = pending.await;
                }
                return result;
            }
            _ = context.ct.cancelled(), if !cancelled => {
                cancelled = true;
                signal.abort(AbortReason::new(CLIENT_CANCELLED));
            }
            _ = ended.cancelled(), if !ending => {
                ending = true;
                signal.abort(AbortReason::new(SESSION_ENDED));
            }
            _ = next_tick(&mut ticker) => {
                if let Some(progress) = &progress {
                    progress.send(&mut sending);
                }
            }
        }
    }
}

pub(crate) async fn next_tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

#[cfg(test)]
mod tests {
    use super::progress_message;

    #[test]
    fn progress_message_carries_the_latest_line_when_known() {
        assert_eq!(progress_message("bash", 3, None), "bash: running for 3s");
        assert_eq!(progress_message("bash", 3, Some("step 1")), "bash: running for 3s \u{2014} step 1");
    }
}
