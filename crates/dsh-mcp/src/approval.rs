//! Approval through MCP elicitation: the question a user sees, and an answerer for the
//! approval hub's waterfall.
//!
//! Outcome mapping: `accept` → `allowed-once`, `decline` → `rejected`, `cancel` →
//! `cancelled`; a client without form elicitation, or a failed exchange, → `unavailable`.
//! A question that offers lasting scopes has one optional form field, `scope`: `accept` with
//! `session` or `always` there grants for that scope.
//!
//! A secret-input question (askpass) is never a form: it is a URL-mode elicitation of a
//! one-time page on loopback ([`crate::secret_page`]) where the user types the secret; a
//! client without URL mode is not asked, and the command's askpass program says why.
//!
//! Every question reaches the client through one seam, [`Elicitor`]: the session's peer (a
//! server-initiated `elicitation/create` request) under the revisions with `initialize`, or
//! the asking call's next round trip under 2026-07-28 (see `crate::rounds`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use dsh_approval::{Answer, AnswerFn, ApprovalQuestion, Scope, escape_untrusted, subject_lines};
use dsh_core::{ApprovalAsk, ApprovalOutcome};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rmcp::model::{
    CustomNotification, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    ServerNotification,
};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use serde_json::Value;

use crate::secret_page::{PageAnswer, SecretPage};

/// The prefix of the reason the bash tool gives when it escalates (`escalate sandbox to <M>: <J>`).
const ESCALATION_PREFIX: &str = "escalate sandbox to ";
/// The prefix of the reason the bash tool gives for a network destination under network
/// policy `ask` (``network access to `host:port` ``).
const NETWORK_PREFIX: &str = "network access to `";
/// Longest argument dump shown in a generic question.
const MAX_ARGS_CHARS: usize = 2000;

/// The arguments of the calls in flight in one session, by call id, so a question can name
/// the command it is about.
#[derive(Clone, Default)]
pub struct InFlightCalls {
    calls: Arc<Mutex<HashMap<String, (String, Value)>>>,
}

impl InFlightCalls {
    /// Records a call as in flight, with its tool name and arguments.
    pub fn insert(&self, call_id: &str, tool: &str, args: &Value) {
        self.calls.lock().insert(call_id.to_owned(), (tool.to_owned(), args.clone()));
    }
    /// Forgets a call once it has finished.
    pub fn remove(&self, call_id: &str) {
        self.calls.lock().remove(call_id);
    }
    /// The arguments of a call in flight.
    pub fn args(&self, call_id: &str) -> Option<Value> {
        self.calls.lock().get(call_id).map(|(_, args)| args.clone())
    }
}

/// The text a user is asked. A command's question (the request carried its subject) shows
/// the command, its working directory, the mode or destination asked for and the model's
/// justification ([`subject_lines`]). Any other shows the tool, the command or arguments of
/// the call when known, and the reason. Every text from the model or a command is shown with
/// its control characters escaped.
pub fn approval_message(question: &ApprovalQuestion, args: Option<&Value>) -> String {
    if let Some(subject) = &question.subject {
        let lines = subject_lines(&question.tool_name, subject);
        let accept = match subject.asked {
            ApprovalAsk::Host(_) => "Accept to allow it for the rest of this command; decline to refuse.",
            ApprovalAsk::Mode(_) => "Accept to allow it once; decline to refuse.",
        };
        return format!("{}\n\n{}\n\n{accept}", lines.headline, lines.details.join("\n"));
    }
    let command = args.and_then(|a| a.get("command")).and_then(Value::as_str).map(escape_untrusted);
    let reason = question.reason.as_deref().map(escape_untrusted);
    let escalation = reason
        .as_deref()
        .and_then(|r| r.strip_prefix(ESCALATION_PREFIX))
        .and_then(|rest| rest.split_once(": "));
    let destination = reason
        .as_deref()
        .and_then(|r| r.strip_prefix(NETWORK_PREFIX))
        .and_then(|rest| rest.strip_suffix('`'));
    let mut lines = Vec::new();
    if let Some(destination) = destination {
        lines.push(format!("Allow this {} command to connect to {destination}?", question.tool_name));
        lines.push(String::new());
        if let Some(command) = &command {
            lines.push(format!("Command: {command}"));
        }
        lines.push(format!("Destination: {destination} (not in the network allowlist)"));
        lines.push(String::new());
        lines.push("Accept to allow it for the rest of this command; decline to refuse.".to_owned());
        return lines.join("\n");
    }
    match escalation {
        Some((mode, justification)) => {
            lines.push(format!(
                "Allow this {} command to run once with wider sandbox access ({mode})?",
                question.tool_name
            ));
            lines.push(String::new());
            if let Some(command) = &command {
                lines.push(format!("Command: {command}"));
            }
            lines.push(format!("Requested mode: {mode}"));
            lines.push(format!("Justification: {justification}"));
        }
        None => {
            lines.push(format!("Allow tool \"{}\" to run once?", question.tool_name));
            lines.push(String::new());
            if let Some(command) = &command {
                lines.push(format!("Command: {command}"));
            } else if let Some(args) = args {
                let mut text = escape_untrusted(&args.to_string());
                if text.chars().count() > MAX_ARGS_CHARS {
                    text = text.chars().take(MAX_ARGS_CHARS).collect::<String>() + "…";
                }
                lines.push(format!("Arguments: {text}"));
            }
            if let Some(reason) = &reason {
                lines.push(format!("Reason: {reason}"));
            }
        }
    }
    lines.push(String::new());
    lines.push("Accept to allow it once; decline to refuse.".to_owned());
    lines.join("\n")
}

/// Why a client gets no secret question: the command's askpass program prints it.
pub const NO_URL_MODE: &str = "the MCP client cannot be asked for a secret: that needs URL-mode \
elicitation (the user types it on a one-time page of this host), which the client did not declare; \
a secret is never asked in a form";

/// The method of the notice that a URL-mode elicitation's page was answered.
pub const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";

/// The text a user is asked for a secret: which command asks, and its prompt, marked as the
/// command's own words (a command can ask anything), and that it is typed on the page.
pub fn secret_message(question: &ApprovalQuestion, prompt: &str, args: Option<&Value>) -> String {
    let command = args.and_then(|a| a.get("command")).and_then(Value::as_str).map(escape_untrusted);
    let prompt = escape_untrusted(prompt);
    let mut lines =
        vec![format!("A {} command asks you for a secret (a password or passphrase).", question.tool_name)];
    lines.push(String::new());
    if let Some(command) = &command {
        lines.push(format!("Command: {command}"));
    }
    lines.push(format!("Its prompt (the command's own words, not the harness's): {prompt}"));
    lines.push(String::new());
    lines.push(
        "Open the page to type it there: it goes to this command only, never to this client or the model. The page answers once; decline to refuse."
            .to_owned(),
    );
    lines.join("\n")
}

/// Where a question goes to the client's user. The methods mirror [`Peer`]'s own, so a
/// question is asked the same way whichever revision the client speaks.
pub trait Elicitor: Send + Sync {
    /// The elicitation modes the client declared (for the call that asks, under 2026-07-28).
    fn supported_elicitation_modes(&self) -> HashSet<ElicitationMode>;
    /// Asks the client's user; the error says why no answer came.
    fn create_elicitation(&self, params: ElicitRequestParams) -> BoxFuture<'_, Result<ElicitResult, String>>;
    /// Tells the client a URL-mode elicitation was answered on its page
    /// ([`ELICITATION_COMPLETE`]), where the revision has a way to (not under 2026-07-28,
    /// which has no stream outside a request's answer).
    fn elicitation_complete(&self, _elicitation_id: &str) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

impl Elicitor for Peer<RoleServer> {
    fn supported_elicitation_modes(&self) -> HashSet<ElicitationMode> {
        Peer::supported_elicitation_modes(self)
    }

    fn create_elicitation(&self, params: ElicitRequestParams) -> BoxFuture<'_, Result<ElicitResult, String>> {
        Box::pin(
            async move { Peer::create_elicitation(self, params).await.map_err(|error| error.to_string()) },
        )
    }

    fn elicitation_complete(&self, elicitation_id: &str) -> BoxFuture<'_, ()> {
        let notice = CustomNotification::new(
            ELICITATION_COMPLETE,
            Some(serde_json::json!({ "elicitationId": elicitation_id })),
        );
        Box::pin(async move {
            if let Err(error) = self.send_notification(ServerNotification::CustomNotification(notice)).await {
                tracing::debug!(%error, "the elicitation's completion notice was not sent");
            }
        })
    }
}

/// True when the client declared URL-mode elicitation, the only way a secret is asked.
pub fn supports_url_elicitation(peer: &dyn Elicitor) -> bool {
    peer.supported_elicitation_modes().contains(&ElicitationMode::Url)
}

/// Asks the client's user for a secret through URL-mode elicitation: a one-time page on
/// loopback ([`SecretPage`]) takes the secret, which goes from there to the command; the
/// client is sent the page's URL only, and told when the page was answered
/// ([`ELICITATION_COMPLETE`]). The page ends with this future (the call's end drops it).
/// A client without URL mode is not asked: [`Answer::Failed`] with [`NO_URL_MODE`].
pub async fn elicit_secret(
    peer: &dyn Elicitor,
    question: &ApprovalQuestion,
    prompt: &str,
    args: Option<&Value>,
) -> Answer {
    if !supports_url_elicitation(peer) {
        return Answer::Failed(NO_URL_MODE.to_owned());
    }
    let command = args.and_then(|a| a.get("command")).and_then(Value::as_str);
    let mut page = match SecretPage::open(&question.tool_name, command, prompt) {
        Ok(page) => page,
        Err(why) => {
            tracing::warn!(%why, "no secret page");
            return Answer::Failed(why);
        }
    };
    let params = ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: secret_message(question, prompt, args),
        url: page.url().to_owned(),
        elicitation_id: page.elicitation_id().to_owned(),
    };
    let elicited = peer.create_elicitation(params);
    tokio::pin!(elicited);
    let answer = page.answer();
    tokio::pin!(answer);
    let mut waiting_for_client = true;
    let answered = loop {
        tokio::select! {
            answered = &mut answer => break answered,
            result = &mut elicited, if waiting_for_client => {
                waiting_for_client = false;
                let outcome = match result {
                    // The user agreed to open the page: its answer decides.
                    Ok(result) if result.action == ElicitationAction::Accept => continue,
                    Ok(result) if result.action == ElicitationAction::Decline => ApprovalOutcome::Rejected,
                    Ok(_) => ApprovalOutcome::Cancelled,
                    Err(error) => {
                        tracing::warn!(%error, "secret elicitation failed");
                        ApprovalOutcome::Unavailable
                    }
                };
                return Answer::Outcome(outcome.as_str().to_owned());
            }
        }
    };
    peer.elicitation_complete(page.elicitation_id()).await;
    match answered {
        Some(PageAnswer::Given(secret)) => Answer::Secret(secret),
        Some(PageAnswer::Refused) => Answer::Outcome(ApprovalOutcome::Rejected.as_str().to_owned()),
        None => Answer::Outcome(ApprovalOutcome::Unavailable.as_str().to_owned()),
    }
}

/// True when the client declared form elicitation.
pub fn supports_elicitation(peer: &dyn Elicitor) -> bool {
    peer.supported_elicitation_modes().contains(&ElicitationMode::Form)
}

/// Asks the client's user `question` through form elicitation. `args` are the call's
/// arguments, when known, so the question can show the command.
pub async fn elicit(
    peer: &dyn Elicitor,
    question: &ApprovalQuestion,
    args: Option<&Value>,
) -> ApprovalOutcome {
    match elicit_answer(peer, question, args).await {
        Answer::Granted(_) => ApprovalOutcome::AllowedOnce,
        Answer::Outcome(raw) => ApprovalOutcome::parse(&raw).unwrap_or(ApprovalOutcome::Unavailable),
        _ => ApprovalOutcome::Unavailable,
    }
}

/// The field of an approval form that carries the scope the user picks (`once`, `session`,
/// `always`); present only when the question offers a lasting scope.
pub const SCOPE_FIELD: &str = "scope";

/// The form of a consent question: nothing to fill in (consent is the action itself), or,
/// when the question offers lasting scopes, one optional [`SCOPE_FIELD`] whose default is
/// `once`.
pub fn approval_schema(question: &ApprovalQuestion) -> ElicitationSchema {
    let Some(offer) = question.offer.as_ref().filter(|o| !o.scopes.is_empty()) else {
        return ElicitationSchema::new(BTreeMap::new());
    };
    let mut values = vec!["once"];
    values.extend(offer.scopes.iter().map(|s| s.as_str()));
    let mut meanings = vec!["once: this call only".to_owned()];
    for scope in &offer.scopes {
        meanings.push(match scope {
            Scope::Session => "session: not asked again in this session".to_owned(),
            Scope::Always => "always: saved in your policy file, not asked again".to_owned(),
            Scope::Once => continue,
        });
    }
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            SCOPE_FIELD: {
                "type": "string",
                "title": "Allow for",
                "description": format!(
                    "What accepting grants ({}): {}.",
                    escape_untrusted(&offer.grant.describe()),
                    meanings.join("; ")
                ),
                "enum": values,
                "default": "once",
            }
        },
    });
    match schema {
        Value::Object(object) => ElicitationSchema::from_json_schema(object)
            .unwrap_or_else(|_| ElicitationSchema::new(BTreeMap::new())),
        _ => ElicitationSchema::new(BTreeMap::new()),
    }
}

/// The answer of an approval form: `accept` with a lasting scope the question offered in
/// [`SCOPE_FIELD`] grants it ([`Answer::Granted`]); any other `accept` allows once.
fn approval_answer(
    question: &ApprovalQuestion,
    action: ElicitationAction,
    content: Option<&Value>,
) -> Answer {
    let outcome = match action {
        ElicitationAction::Accept => {
            let picked =
                content.and_then(|c| c.get(SCOPE_FIELD)).and_then(Value::as_str).and_then(Scope::parse);
            let offered = |scope| question.offer.as_ref().is_some_and(|o| o.scopes.contains(&scope));
            match picked {
                Some(scope) if scope != Scope::Once && offered(scope) => return Answer::Granted(scope),
                _ => ApprovalOutcome::AllowedOnce,
            }
        }
        ElicitationAction::Decline => ApprovalOutcome::Rejected,
        ElicitationAction::Cancel => ApprovalOutcome::Cancelled,
        #[allow(unreachable_patterns)]
        _ => ApprovalOutcome::Unavailable,
    };
    Answer::Outcome(outcome.as_str().to_owned())
}

/// Asks the client's user `question` through form elicitation, with the scopes it offers
/// ([`approval_schema`]); the answer may grant one ([`approval_answer`]).
pub async fn elicit_answer(peer: &dyn Elicitor, question: &ApprovalQuestion, args: Option<&Value>) -> Answer {
    if !supports_elicitation(peer) {
        return Answer::Outcome(ApprovalOutcome::Unavailable.as_str().to_owned());
    }
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: approval_message(question, args),
        requested_schema: approval_schema(question),
    };
    match peer.create_elicitation(params).await {
        Ok(result) => approval_answer(question, result.action, result.content.as_ref()),
        Err(error) => {
            tracing::warn!(%error, "approval elicitation failed");
            Answer::Outcome(ApprovalOutcome::Unavailable.as_str().to_owned())
        }
    }
}

/// An answerer for the approval hub that elicits through `peer`: consent in a form, a secret
/// by URL ([`elicit_secret`]). A client without form elicitation passes a consent question to
/// the next answerer (ending at `unavailable` when there is none).
pub fn elicitation_answerer(peer: Peer<RoleServer>, calls: InFlightCalls) -> AnswerFn {
    let peer: Arc<dyn Elicitor> = Arc::new(peer);
    answerer_through(move |_question| Some(Arc::clone(&peer)), calls)
}

/// An answerer that asks each question through the [`Elicitor`] `route` names for it; none,
/// or one whose client cannot answer, passes to the next answerer.
pub(crate) fn answerer_through<F>(route: F, calls: InFlightCalls) -> AnswerFn
where
    F: Fn(&ApprovalQuestion) -> Option<Arc<dyn Elicitor>> + Send + Sync + 'static,
{
    Arc::new(move |question: ApprovalQuestion| {
        let asker = route(&question);
        let calls = calls.clone();
        Box::pin(async move {
            let Some(asker) = asker else { return Answer::Pass };
            let args = question.call_id.as_deref().and_then(|id| calls.args(id));
            ask(&*asker, &question, args.as_ref()).await
        })
    })
}

/// The one place a question is put to a client's user, whatever the revision: a secret
/// question as [`elicit_secret`] (URL mode only), any other as [`elicit_answer`] (a form, with
/// the scopes it offers); a client that cannot take the question passes.
pub async fn ask(peer: &dyn Elicitor, question: &ApprovalQuestion, args: Option<&Value>) -> Answer {
    if let Some(prompt) = &question.secret_prompt {
        if !supports_url_elicitation(peer) {
            return Answer::Pass;
        }
        return elicit_secret(peer, question, prompt, args).await;
    }
    if !supports_elicitation(peer) {
        return Answer::Pass;
    }
    elicit_answer(peer, question, args).await
}

/// The last answerer of a session whose client cannot take a secret: it refuses every secret
/// question, saying why ([`NO_URL_MODE`]).
pub fn no_url_mode_answerer() -> AnswerFn {
    Arc::new(|_question: ApprovalQuestion| Box::pin(async { Answer::Failed(NO_URL_MODE.to_owned()) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::Agent;
    use serde_json::json;

    fn question(tool: &str, reason: Option<&str>) -> ApprovalQuestion {
        ApprovalQuestion {
            id: "q-1".into(),
            agent: Agent::new("s1", None),
            tool_name: tool.into(),
            call_id: Some("call-1".into()),
            reason: reason.map(str::to_owned),
            secret_prompt: None,
            subject: None,
            offer: None,
        }
    }

    #[test]
    fn escalation_question_names_command_mode_and_justification() {
        let q = question("bash", Some("escalate sandbox to workspace-write: the build writes target/"));
        let args = json!({"command": "cargo build", "description": "Build"});
        assert_eq!(
            approval_message(&q, Some(&args)),
            "Allow this bash command to run once with wider sandbox access (workspace-write)?\n\n\
             Command: cargo build\nRequested mode: workspace-write\n\
             Justification: the build writes target/\n\nAccept to allow it once; decline to refuse."
        );
    }

    #[test]
    fn generic_question_names_tool_arguments_and_reason() {
        let q = question("job_kill", Some("policy says ask"));
        let args = json!({"job_id": "bash-1"});
        assert_eq!(
            approval_message(&q, Some(&args)),
            "Allow tool \"job_kill\" to run once?\n\nArguments: {\"job_id\":\"bash-1\"}\n\
             Reason: policy says ask\n\nAccept to allow it once; decline to refuse."
        );
        assert_eq!(
            approval_message(&question("bash", None), Some(&json!({"command": "rm -rf build"}))),
            "Allow tool \"bash\" to run once?\n\nCommand: rm -rf build\n\nAccept to allow it once; decline to refuse."
        );
    }

    #[test]
    fn network_question_names_command_and_destination() {
        let q = question("bash", Some("network access to `pypi.org:443`"));
        let args = json!({"command": "pip install requests", "description": "Install"});
        assert_eq!(
            approval_message(&q, Some(&args)),
            "Allow this bash command to connect to pypi.org:443?\n\nCommand: pip install requests\n\
             Destination: pypi.org:443 (not in the network allowlist)\n\n\
             Accept to allow it for the rest of this command; decline to refuse."
        );
    }

    #[test]
    fn secret_question_names_the_command_and_marks_its_prompt() {
        let q = question("bash", None);
        let args = json!({"command": "sudo -A apt-get update", "description": "Update"});
        assert_eq!(
            secret_message(&q, "[sudo] password for dev: ", Some(&args)),
            "A bash command asks you for a secret (a password or passphrase).\n\n\
             Command: sudo -A apt-get update\n\
             Its prompt (the command's own words, not the harness's): [sudo] password for dev: \n\n\
             Open the page to type it there: it goes to this command only, never to this client or the model. \
             The page answers once; decline to refuse."
        );
    }

    #[test]
    fn a_commands_question_shows_its_subject_escaped() {
        let mut q = question("bash", Some("network access to `evil.example:443`"));
        q.subject = Some(dsh_core::ApprovalSubject {
            command: "curl https://evil.example\u{1b}]0;x\u{7}".into(),
            cwd: "/ws".into(),
            asked: ApprovalAsk::Host("evil.example:443".into()),
            justification: None,
            notes: Vec::new(),
        });
        assert_eq!(
            approval_message(&q, Some(&json!({"command": "ignored: the subject is shown"}))),
            "Allow this bash command to connect to evil.example:443?\n\n\
             Command: curl https://evil.example\\x1b]0;x\\x07\nWorking directory: /ws\n\
             Destination: evil.example:443 (not in the network allowlist)\n\
             (control characters are shown as \\x.. and \\u{..} escapes)\n\n\
             Accept to allow it for the rest of this command; decline to refuse."
        );
        // Without a subject, the generic question escapes what it shows too.
        let generic = question("job_kill", Some("policy\rsays ask"));
        assert_eq!(
            approval_message(&generic, Some(&json!({"command": "a\u{202e}b"}))),
            "Allow tool \"job_kill\" to run once?\n\nCommand: a\\u{202e}b\nReason: policy\\rsays ask\n\n\
             Accept to allow it once; decline to refuse."
        );
    }

    #[test]
    fn in_flight_calls_track_arguments() {
        let calls = InFlightCalls::default();
        calls.insert("call-1", "bash", &json!({"command": "ls"}));
        assert_eq!(calls.args("call-1"), Some(json!({"command": "ls"})));
        calls.remove("call-1");
        assert_eq!(calls.args("call-1"), None);
    }
}
