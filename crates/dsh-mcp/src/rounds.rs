//! Multi-round-trip calls (the 2026-07-28 revision): a server sends its client no requests of
//! its own, so a question a running call asks (an approval, a network destination, a secret)
//! ends the call's current request with an `InputRequiredResult`, and the client answers by
//! sending the call again with `inputResponses` and the `requestState` it was given.
//!
//! The call itself runs on in a task of its own between rounds: its process is not restarted
//! and nothing it did is done twice. The `requestState` is an opaque, unguessable handle to
//! that running call in the session that started it (no data travels in it), so the echoed
//! value needs no integrity check: a state this session never gave out finds nothing.
//!
//! Each round waits for whichever comes first: the call's result (the round answers it), a
//! question (the round answers `input_required`), or the round's own cancellation (the
//! call's abort signal fires, as a cancelled call's does under the older revisions).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::tools::OutputProbeSlot;
use dsh_core::{AbortReason, AbortSignal};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rmcp::model::{
    CallToolResponse, CallToolResult, ElicitRequest, ElicitRequestParams, ElicitResult, InputRequest,
    InputRequiredResult, InputResponses,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};
use tokio::sync::{mpsc, oneshot};

use crate::approval::Elicitor;

/// How long a question waits for its client to send the call again with the answer; then it
/// is answered as if the client could not answer (`unavailable`).
const ANSWER_WAIT: Duration = Duration::from_secs(600);

/// The reason a call is aborted with when a round waiting for it is cancelled.
pub(crate) const ROUND_CANCELLED: &str = "cancelled by the MCP client";

/// The running multi-round calls of one session.
#[derive(Default)]
pub(crate) struct Rounds {
    /// Calls that can still ask, by the session's call id (the id questions carry).
    by_call: Mutex<HashMap<String, Arc<RoundCall>>>,
    /// Calls whose result no round has taken yet, by the request state given to the client.
    by_state: Mutex<HashMap<String, Arc<RoundCall>>>,
}

impl Rounds {
    /// Registers a call about to run as `call_id`; its result arrives on the returned sender.
    pub fn start(
        &self,
        call_id: &str,
        tool: &str,
        signal: AbortSignal,
        modes: HashSet<ElicitationMode>,
        output: OutputProbeSlot,
    ) -> (Arc<RoundCall>, oneshot::Sender<CallToolResult>) {
        let (result_tx, result_rx) = oneshot::channel();
        let (questions_tx, questions_rx) = mpsc::unbounded_channel();
        let call = Arc::new(RoundCall {
            state: format!("dsh-round-{}", uuid::Uuid::new_v4().simple()),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            signal,
            started: Instant::now(),
            output,
            modes: Mutex::new(modes),
            questions: questions_tx,
            waiting: tokio::sync::Mutex::new(Waiting {
                result: Some(result_rx),
                questions: questions_rx,
                asked: BTreeMap::new(),
                next_key: 1,
            }),
        });
        self.by_call.lock().insert(call_id.to_owned(), Arc::clone(&call));
        self.by_state.lock().insert(call.state.clone(), Arc::clone(&call));
        (call, result_tx)
    }

    /// The call ran to its end: no question can come from it any more.
    pub fn ended(&self, call_id: &str) {
        self.by_call.lock().remove(call_id);
    }

    /// The call a question of `call_id` is for (`None` when it is not a multi-round call).
    pub fn asker(&self, call_id: &str) -> Option<Arc<dyn Elicitor>> {
        self.by_call.lock().get(call_id).map(|call| Arc::clone(call) as Arc<dyn Elicitor>)
    }

    /// The call a client's `requestState` names, with the answers it carries delivered and
    /// the elicitation modes of this round noted.
    pub async fn resume(
        &self,
        state: &str,
        responses: Option<InputResponses>,
        modes: HashSet<ElicitationMode>,
    ) -> Result<Arc<RoundCall>, McpError> {
        let call = self.by_state.lock().get(state).cloned().ok_or_else(|| {
            McpError::invalid_params(
                "Invalid params: requestState names no call of this session waiting for input \
                 (it finished and its result was given, or the session ended)",
                None,
            )
        })?;
        *call.modes.lock() = modes;
        let mut waiting = call.waiting.lock().await;
        let mut responses = responses.unwrap_or_default();
        for (key, reply) in std::mem::take(&mut waiting.asked) {
            let answer = match responses.remove(&key) {
                Some(value) => serde_json::from_value::<ElicitResult>(value).map_err(|error| {
                    format!("the client's answer to {key} is no elicitation result: {error}")
                }),
                None => Err(format!("the client sent the call again without an answer to {key}")),
            };
            let _ = reply.send(answer);
        }
        drop(waiting);
        Ok(call)
    }

    /// One round of `call`: its result, or the questions it asks meanwhile.
    pub async fn round(
        &self,
        call: &Arc<RoundCall>,
        context: &RequestContext<RoleServer>,
        ticker: &mut Option<tokio::time::Interval>,
        mut on_tick: impl FnMut(),
    ) -> CallToolResponse {
        let mut guard = call.waiting.lock().await;
        let waiting = &mut *guard;
        let mut cancelled = false;
        loop {
            let Some(result) = waiting.result.as_mut() else {
                // A concurrent round took the result.
                return CallToolResponse::Complete(CallToolResult::error(vec![
                    rmcp::model::ContentBlock::text(
                        "Error: this call's result was already given to another request",
                    ),
                ]));
            };
            tokio::select! {
                result = result => {
                    waiting.result = None;
                    self.by_state.lock().remove(&call.state);
                    return match result {
                        Ok(result) => CallToolResponse::Complete(result),
                        Err(_) => CallToolResponse::Complete(CallToolResult::error(vec![
                            rmcp::model::ContentBlock::text("Error: the call ended without a result"),
                        ])),
                    };
                }
                question = waiting.questions.recv() => {
                    let Some(first) = question else { continue };
                    let mut asked = vec![first];
                    while let Ok(more) = waiting.questions.try_recv() {
                        asked.push(more);
                    }
                    let mut requests = BTreeMap::new();
                    for question in asked {
                        let key = format!("dsh-question-{}", waiting.next_key);
                        waiting.next_key += 1;
                        requests.insert(key.clone(), InputRequest::Elicitation(ElicitRequest::new(question.params)));
                        waiting.asked.insert(key, question.reply);
                    }
                    return CallToolResponse::InputRequired(InputRequiredResult::new(
                        Some(requests),
                        Some(call.state.clone()),
                    ));
                }
                () = context.ct.cancelled(), if !cancelled => {
                    cancelled = true;
                    call.signal.abort(AbortReason::new(ROUND_CANCELLED));
                }
                () = crate::server::next_tick(ticker) => on_tick(),
            }
        }
    }
}

/// A question waiting to be put to the client in the call's next round.
struct Question {
    params: ElicitRequestParams,
    reply: oneshot::Sender<Result<ElicitResult, String>>,
}

/// What only the round waiting for a call touches.
struct Waiting {
    result: Option<oneshot::Receiver<CallToolResult>>,
    questions: mpsc::UnboundedReceiver<Question>,
    /// Questions given to the client, by their key, waiting for the call's next round.
    asked: BTreeMap<String, oneshot::Sender<Result<ElicitResult, String>>>,
    next_key: u64,
}

/// One running multi-round call.
pub(crate) struct RoundCall {
    state: String,
    call_id: String,
    /// The tool called (progress messages name it).
    pub tool: String,
    signal: AbortSignal,
    /// When the call started, and its output probe (for progress in any of its rounds).
    pub started: Instant,
    pub output: OutputProbeSlot,
    /// The elicitation modes the client declared in the call's latest round.
    modes: Mutex<HashSet<ElicitationMode>>,
    questions: mpsc::UnboundedSender<Question>,
    waiting: tokio::sync::Mutex<Waiting>,
}

impl Elicitor for RoundCall {
    fn supported_elicitation_modes(&self) -> HashSet<ElicitationMode> {
        self.modes.lock().clone()
    }

    fn create_elicitation(&self, params: ElicitRequestParams) -> BoxFuture<'_, Result<ElicitResult, String>> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.questions
                .send(Question { params, reply })
                .map_err(|_| format!("call {} no longer takes answers", self.call_id))?;
            match tokio::time::timeout(ANSWER_WAIT, answer).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err(format!("call {} no longer takes answers", self.call_id)),
                Err(_) => Err(format!(
                    "the client did not send call {} again with an answer within {}s",
                    self.call_id,
                    ANSWER_WAIT.as_secs()
                )),
            }
        })
    }
}

/// The elicitation modes a request's `_meta` declares (2026-07-28 carries the client's
/// capabilities in every request).
pub(crate) fn declared_modes(context: &RequestContext<RoleServer>) -> HashSet<ElicitationMode> {
    let mut modes = HashSet::new();
    if let Some(elicitation) = context.client_capabilities().and_then(|caps| caps.elicitation) {
        if elicitation.form.is_none() && elicitation.url.is_none() {
            modes.insert(ElicitationMode::Form);
        }
        if elicitation.form.is_some() {
            modes.insert(ElicitationMode::Form);
        }
        if elicitation.url.is_some() {
            modes.insert(ElicitationMode::Url);
        }
    }
    modes
}
