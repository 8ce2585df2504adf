//! The approval hub: policy, audit, answerer waterfall.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dsh_core::{
    APPROVAL, AbortSignal, Agent, AgentMessage, ApprovalError, ApprovalOutcome, ApprovalRequest,
    ApprovalService, ApprovalSubject, ConfigError, Disposer, Handles, Plugin, PluginError, PluginScope,
    Secret, SecretReply, SecretRequest, ServiceKey, Session, SessionError,
};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::policy::{EffectivePolicy, Grant, GrantOffer, PolicyPaths, Ruling, Scope};

/// The approval policy: ask answerers, or reject everything without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalPolicy {
    /// Ask the registered answerers, in order, until one answers (`ask`).
    Ask,
    /// Reject every request without asking anyone (`never`).
    Never,
}

impl ApprovalPolicy {
    /// The wire spelling (`ask`, `never`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Ask => "ask",
            ApprovalPolicy::Never => "never",
        }
    }

    /// Parses `ask`/`never`; anything else is refused with a fixed message.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "ask" => Ok(ApprovalPolicy::Ask),
            "never" => Ok(ApprovalPolicy::Never),
            _ => Err(PolicyError::Unknown.to_string()),
        }
    }
}

/// Why switching a session's approval policy failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The policy named is neither `ask` nor `never`.
    #[error("approval policy must be one of \"ask\" or \"never\"")]
    Unknown,
    /// Recording the `approval/policy` event in the session failed.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// What an answerer sees.
#[derive(Clone, Debug)]
pub struct ApprovalQuestion {
    /// The audit id of this request.
    pub id: String,
    /// The agent whose tool call asks.
    pub agent: Arc<Agent>,
    /// The name of the tool being called.
    pub tool_name: String,
    /// The id of the tool call, when the request carries one.
    pub call_id: Option<String>,
    /// Why the call needs approval, as the tool words it.
    pub reason: Option<String>,
    /// For a secret-input question (askpass), the prompt the command gave, in its own
    /// untrusted words; `None` for a consent question. An answerer that cannot take a secret
    /// passes on such a question.
    pub secret_prompt: Option<String>,
    /// What a command's consent question is about (command, cwd, the mode or host asked
    /// for), when the request carried it; see [`crate::subject_lines`] for how it shows.
    pub subject: Option<ApprovalSubject>,
    /// The grant a command's consent question offers and the lasting scopes the user may
    /// pick for it ([`Answer::Granted`]); `None` when only a one-shot answer can be given.
    pub offer: Option<GrantOffer>,
}

/// An answerer's reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// An outcome (validated against the vocabulary; anything else counts as `unavailable`).
    Outcome(String),
    /// Delegate to the next answerer.
    Pass,
    /// The answerer failed (counts as `unavailable`); for a secret-input question the
    /// message reaches the asking program, as why it got no secret.
    Failed(String),
    /// The secret the user typed, for a secret-input question (to a consent question it
    /// counts as `unavailable`).
    Secret(Secret),
    /// Allowed, with the question's grant for this scope ([`GrantOffer::scopes`]): `session`
    /// is not asked again in this session, `always` is saved in the user's policy file. A
    /// scope the question did not offer allows once; to any other question it counts as
    /// `unavailable`.
    Granted(Scope),
}

/// What a decision gave besides its outcome: the secret of a secret-input question, else why
/// an answerer failed, when one did.
type Given = Result<Secret, Option<String>>;

/// An answerer in the waterfall.
pub type AnswerFn = Arc<dyn Fn(ApprovalQuestion) -> BoxFuture<'static, Answer> + Send + Sync>;

struct AnswererEntry {
    id: u64,
    /// Only requests of this agent id reach a scoped answerer.
    scope: Option<String>,
    /// Sees secret-input questions only; no channel for consent (see
    /// [`ApprovalHub::register_secret_answerer`]).
    secrets_only: bool,
    answer: AnswerFn,
}

/// Service key of the hub (answerer registration, policy switches).
pub const APPROVAL_HUB: ServiceKey<Arc<ApprovalHub>> = ServiceKey::new("approvalHub");

/// The approval service.
pub struct ApprovalHub {
    policy: ApprovalPolicy,
    next: AtomicU64,
    answerers: Arc<Mutex<Vec<AnswererEntry>>>,
    /// Set by the host once the registered answerers are every channel an answer can come
    /// from (see [`ApprovalHub::answerers_are_exhaustive`]).
    exhaustive: AtomicBool,
    /// Where the policy files are; `None`: none are read and nothing is saved (only
    /// `session` grants are offered).
    paths: Option<PolicyPaths>,
    /// The `session` grants given, by session id.
    session_grants: Mutex<HashMap<String, Vec<Grant>>>,
}

/// How one request was decided.
struct Decided {
    outcome: ApprovalOutcome,
    /// The secret of a secret-input question, or why an answerer failed.
    secret: Given,
    /// The lasting scope the answer picked (and the question offered).
    scope: Option<Scope>,
}

impl ApprovalHub {
    /// A hub with the given policy and no answerers yet.
    pub fn new(policy: ApprovalPolicy) -> Arc<Self> {
        Self::build(policy, None)
    }

    /// A hub with the given policy whose grants the policy files at `paths` bound (and whose
    /// `always` grants are saved in the user's file there).
    pub fn with_policy_files(policy: ApprovalPolicy, paths: PolicyPaths) -> Arc<Self> {
        Self::build(policy, Some(paths))
    }

    fn build(policy: ApprovalPolicy, paths: Option<PolicyPaths>) -> Arc<Self> {
        Arc::new(Self {
            policy,
            next: AtomicU64::new(1),
            answerers: Arc::new(Mutex::new(Vec::new())),
            exhaustive: AtomicBool::new(false),
            paths,
            session_grants: Mutex::new(HashMap::new()),
        })
    }

    /// Where the policy files are, when this hub reads them.
    pub fn policy_paths(&self) -> Option<&PolicyPaths> {
        self.paths.as_ref()
    }

    /// What the policy files and the session's grants decide about `grant` in `session`.
    fn rule(&self, session: &str, grant: &Grant) -> Ruling {
        let given = self.session_grants.lock().get(session).cloned().unwrap_or_default();
        match &self.paths {
            Some(paths) => EffectivePolicy::load(paths).rule(grant, &given),
            // Without a user's file, nothing can be saved: `always` is not offered.
            None => match (EffectivePolicy { files: Vec::new() }).rule(grant, &given) {
                Ruling::Ask(scopes) => {
                    Ruling::Ask(scopes.into_iter().filter(|s| *s != Scope::Always).collect())
                }
                other => other,
            },
        }
    }

    /// Keeps a grant the user gave for `scope` (`session`: in memory for `session`; `always`:
    /// in the user's policy file). A grant that cannot be saved is reported on stderr.
    fn keep(&self, session: &str, grant: &Grant, scope: Scope) {
        match scope {
            Scope::Once => {}
            Scope::Session => {
                self.session_grants.lock().entry(session.to_owned()).or_default().push(grant.clone())
            }
            Scope::Always => {
                let Some(paths) = &self.paths else { return };
                if let Err(e) = crate::policy::save_always(&paths.user, grant) {
                    eprintln!(
                        "dsh-bash: warning: cannot save the grant ({}) in {}: {e}; it holds for this session",
                        grant.describe(),
                        paths.user.display()
                    );
                }
                self.session_grants.lock().entry(session.to_owned()).or_default().push(grant.clone());
            }
        }
    }

    /// Declares that the answerers registered with this hub, at any moment, are every channel
    /// an answer can come from: the host registers an answerer only when it can answer, and
    /// registers it before the calls it serves. From then on a call whose agent no registered
    /// answerer serves (unscoped, or scoped to its id) cannot get an answer, and
    /// [`ApprovalService::can_answer`] says so. Without this declaration the hub assumes an
    /// answerer may still arrive.
    pub fn answerers_are_exhaustive(&self) {
        self.exhaustive.store(true, Ordering::Relaxed);
    }

    /// Adds an answerer (first or last in the waterfall), optionally scoped to one agent id.
    pub fn register_answerer(&self, scope: Option<String>, answer: AnswerFn, prepend: bool) -> Disposer {
        self.register(scope, answer, prepend, false)
    }

    /// Adds an answerer that is asked secret-input questions only (a scripted secret): it is
    /// not a channel that can allow a call, so [`ApprovalService::can_answer`] does not count it.
    pub fn register_secret_answerer(
        &self,
        scope: Option<String>,
        answer: AnswerFn,
        prepend: bool,
    ) -> Disposer {
        self.register(scope, answer, prepend, true)
    }

    fn register(
        &self,
        scope: Option<String>,
        answer: AnswerFn,
        prepend: bool,
        secrets_only: bool,
    ) -> Disposer {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut list = self.answerers.lock();
            let entry = AnswererEntry { id, scope, secrets_only, answer };
            if prepend { list.insert(0, entry) } else { list.push(entry) }
        }
        let answerers = Arc::clone(&self.answerers);
        Disposer::new(move || answerers.lock().retain(|e| e.id != id))
    }

    /// The session's last `approval/policy` event, else the configured policy.
    pub fn effective_policy(&self, session: &Session) -> ApprovalPolicy {
        session
            .last_event("approval/policy")
            .and_then(|e| {
                e.data.get("policy").and_then(Value::as_str).and_then(|p| ApprovalPolicy::parse(p).ok())
            })
            .unwrap_or(self.policy)
    }

    /// Switches the session's policy (one `approval/policy` event) and tells the agent.
    pub fn set_approval_policy(&self, agent: &Agent, policy: &str) -> Result<(), PolicyError> {
        let next = ApprovalPolicy::parse(policy).map_err(|_| PolicyError::Unknown)?;
        let prev = self.effective_policy(agent.session());
        agent.session().append("approval/policy", json!({ "policy": next.as_str() }))?;
        if prev != next {
            agent.inject(AgentMessage::user(format!(
                "The approval policy changed from \"{}\" to \"{}\" (changed by the user).",
                prev.as_str(),
                next.as_str()
            )));
        }
        Ok(())
    }

    /// The `approval:policy` runtime context text for a session.
    pub fn context_text(&self, session: &Session) -> String {
        match self.effective_policy(session) {
            ApprovalPolicy::Ask => "Approval policy: ask. Operations that require approval may ask through the configured answerers; without an available answerer, the request fails closed.".to_owned(),
            ApprovalPolicy::Never => "Approval prompts are disabled in this session: actions that require approval are rejected automatically — do not request sandbox escalation (do not set `sandbox_permissions`).".to_owned(),
        }
    }

    /// The waterfall's decision, and for a secret-input question the secret it was given or,
    /// when an answerer failed, why.
    async fn ask_answerers(&self, question: ApprovalQuestion) -> Decided {
        let answerers: Vec<AnswerFn> = self
            .answerers
            .lock()
            .iter()
            .filter(|e| e.scope.as_deref().is_none_or(|s| s == question.agent.id()))
            .filter(|e| question.secret_prompt.is_some() || !e.secrets_only)
            .map(|e| Arc::clone(&e.answer))
            .collect();
        let secret = question.secret_prompt.is_some();
        let offered = question.offer.as_ref().map(|offer| offer.scopes.clone());
        let decided = |outcome, secret, scope| Decided { outcome, secret, scope };
        for answer in answerers {
            let (outcome, given) = match answer_contained(&answer, question.clone()).await {
                Answer::Pass => continue,
                Answer::Failed(why) => (ApprovalOutcome::Unavailable, Err(Some(why))),
                Answer::Secret(given) if secret => (ApprovalOutcome::AllowedOnce, Ok(given)),
                Answer::Secret(_) => (ApprovalOutcome::Unavailable, Err(None)),
                Answer::Granted(scope) => match &offered {
                    Some(scopes) if scopes.contains(&scope) => {
                        return decided(ApprovalOutcome::AllowedOnce, Err(None), Some(scope));
                    }
                    Some(_) => (ApprovalOutcome::AllowedOnce, Err(None)),
                    None => (ApprovalOutcome::Unavailable, Err(None)),
                },
                Answer::Outcome(raw) => {
                    // Consent without the secret gives the command nothing.
                    let outcome = match ApprovalOutcome::parse(&raw) {
                        Some(ApprovalOutcome::AllowedOnce) if secret => ApprovalOutcome::Unavailable,
                        Some(outcome) => outcome,
                        None => ApprovalOutcome::Unavailable,
                    };
                    (outcome, Err(None))
                }
            };
            return decided(outcome, given, None);
        }
        decided(ApprovalOutcome::Unavailable, Err(None), None)
    }

    /// One audited decision: `approval/asked` (with `fields` after the id), the
    /// decision order of the contract, `approval/decided`. A `ruled` decision (a policy
    /// rule's or a grant's: the outcome and which rule) is taken without asking anyone, and
    /// `approval/decided` names its `rule`; a lasting scope the answer picked is its `scope`.
    async fn decide(
        &self,
        agent: &Arc<Agent>,
        fields: Vec<(&'static str, Value)>,
        signal: Option<&AbortSignal>,
        ruled: Option<(ApprovalOutcome, &str)>,
        question: impl FnOnce(String) -> ApprovalQuestion,
    ) -> Result<Decided, ApprovalError> {
        let session = Arc::clone(agent.session());
        if !session.in_open_turn() {
            return Err(ApprovalError::OutsideTurn);
        }
        let id = uuid::Uuid::new_v4().to_string();
        let mut asked = Map::new();
        asked.insert("id".into(), json!(id));
        asked.extend(fields.into_iter().map(|(k, v)| (k.to_owned(), v)));
        session.append("approval/asked", Value::Object(asked))?;
        let none = |outcome| Decided { outcome, secret: Err(None), scope: None };
        let decided = if signal.is_some_and(|s| s.is_aborted()) {
            none(ApprovalOutcome::Cancelled)
        } else if let Some((outcome, _)) = ruled {
            none(outcome)
        } else if self.effective_policy(&session) == ApprovalPolicy::Never {
            none(ApprovalOutcome::Rejected)
        } else {
            let question = question(id.clone());
            match signal {
                Some(signal) => {
                    tokio::select! {
                        decided = self.ask_answerers(question) => decided,
                        _ = signal.aborted() => none(ApprovalOutcome::Cancelled),
                    }
                }
                None => self.ask_answerers(question).await,
            }
        };
        let mut event = json!({ "id": id, "outcome": decided.outcome.as_str() });
        if let Some((_, rule)) = ruled {
            event["rule"] = json!(rule);
        }
        if let Some(scope) = decided.scope {
            event["scope"] = json!(scope.as_str());
        }
        session.append("approval/decided", event)?;
        Ok(decided)
    }
}

/// The grant a command's approval is about: the destination for a network question, the
/// command (as the model wrote it, as a prefix) at the mode asked for an escalation.
fn grant_of(subject: &ApprovalSubject) -> Grant {
    match &subject.asked {
        dsh_core::ApprovalAsk::Host(host) => Grant::Host(host.clone()),
        dsh_core::ApprovalAsk::Mode(mode) => {
            Grant::Command { prefix: subject.command.trim().to_owned(), mode: mode.clone() }
        }
    }
}

/// Asks one answerer; a panic (making the future or polling it) is a failed answer, like a
/// returned failure, so the request still ends with its `approval/decided` event.
async fn answer_contained(answer: &AnswerFn, question: ApprovalQuestion) -> Answer {
    use futures::FutureExt as _;
    use std::panic::AssertUnwindSafe;
    let Ok(future) = std::panic::catch_unwind(AssertUnwindSafe(|| answer(question))) else {
        return Answer::Failed("the answerer panicked".to_owned());
    };
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Answer::Failed("the answerer panicked".to_owned()))
}

#[async_trait::async_trait]
impl ApprovalService for ApprovalHub {
    /// `false` when the effective policy is `never` (the session's, or the configured one for
    /// a call without an agent), or when the host declared its answerers exhaustive and none
    /// is in scope (an unscoped answerer, or one scoped to the agent's id); `true` otherwise.
    fn can_answer(&self, agent: Option<&Agent>) -> bool {
        let policy = agent.map_or(self.policy, |a| self.effective_policy(a.session()));
        if policy == ApprovalPolicy::Never {
            return false;
        }
        if !self.exhaustive.load(Ordering::Relaxed) {
            return true;
        }
        self.answerers.lock().iter().filter(|e| !e.secrets_only).any(|e| match (&e.scope, agent) {
            (None, _) => true,
            (Some(scope), Some(agent)) => scope == agent.id(),
            (Some(_), None) => false,
        })
    }

    async fn request(&self, request: ApprovalRequest) -> Result<ApprovalOutcome, ApprovalError> {
        let mut asked = vec![("toolName", json!(request.tool_name))];
        if let Some(call_id) = &request.call_id {
            asked.push(("callId", json!(call_id)));
        }
        if let Some(reason) = &request.reason {
            asked.push(("reason", json!(reason)));
        }
        let session = request.agent.session().header().id.clone();
        let grant = request.subject.as_ref().map(grant_of);
        let ruling = grant.as_ref().map(|grant| self.rule(&session, grant));
        let ruled = match &ruling {
            Some(Ruling::Deny(rule)) => Some((ApprovalOutcome::Rejected, rule.as_str())),
            Some(Ruling::Allow(rule)) => Some((ApprovalOutcome::AllowedOnce, rule.as_str())),
            _ => None,
        };
        let offer = match (&grant, &ruling) {
            (Some(grant), Some(Ruling::Ask(scopes))) if !scopes.is_empty() => {
                Some(GrantOffer { grant: grant.clone(), scopes: scopes.clone() })
            }
            _ => None,
        };
        let question = |id| ApprovalQuestion {
            id,
            agent: Arc::clone(&request.agent),
            tool_name: request.tool_name.clone(),
            call_id: request.call_id.clone(),
            reason: request.reason.clone(),
            secret_prompt: None,
            subject: request.subject.clone(),
            offer,
        };
        let decided = self.decide(&request.agent, asked, request.signal.as_ref(), ruled, question).await?;
        let outcome = decided.outcome;
        let mut what = Map::new();
        what.insert("tool".into(), json!(request.tool_name));
        match &request.subject {
            Some(subject) => {
                what.insert("command".into(), json!(subject.command));
                what.insert("cwd".into(), json!(subject.cwd));
                let (key, asked) = match &subject.asked {
                    dsh_core::ApprovalAsk::Mode(mode) => ("mode", mode),
                    dsh_core::ApprovalAsk::Host(host) => ("host", host),
                };
                what.insert(key.into(), json!(asked));
            }
            None => {
                if let Some(reason) = &request.reason {
                    what.insert("reason".into(), json!(reason));
                }
            }
        }
        if let Some((_, rule)) = ruled {
            what.insert("rule".into(), json!(rule));
        }
        if let (Some(scope), Some(grant)) = (decided.scope, &grant) {
            self.keep(&session, grant, scope);
            what.insert("grant".into(), json!(grant.describe()));
            what.insert("scope".into(), json!(scope.as_str()));
        }
        dsh_core::audit::record("approval", Some(&session), what, outcome.as_str());
        Ok(outcome)
    }

    /// Audited like [`ApprovalService::request`]: `approval/asked` carries `kind: "secret"`
    /// and the command's `prompt`, `approval/decided` the outcome (`allowed-once` when the
    /// user gave a secret). The secret itself is recorded nowhere.
    async fn request_secret(&self, request: SecretRequest) -> Result<SecretReply, ApprovalError> {
        let mut asked = vec![("toolName", json!(request.tool_name))];
        if let Some(call_id) = &request.call_id {
            asked.push(("callId", json!(call_id)));
        }
        asked.push(("kind", json!("secret")));
        asked.push(("prompt", json!(request.prompt)));
        let question = |id| ApprovalQuestion {
            id,
            agent: Arc::clone(&request.agent),
            tool_name: request.tool_name.clone(),
            call_id: request.call_id.clone(),
            reason: None,
            secret_prompt: Some(request.prompt.clone()),
            subject: None,
            offer: None,
        };
        let decided = self.decide(&request.agent, asked, request.signal.as_ref(), None, question).await?;
        let decided = (decided.outcome, decided.secret);
        let mut what = Map::new();
        what.insert("tool".into(), json!(request.tool_name));
        what.insert("prompt".into(), json!(request.prompt));
        let verdict = match &decided {
            (_, Ok(_)) => "given",
            (outcome, Err(_)) => outcome.as_str(),
        };
        let session = request.agent.session().header().id.clone();
        dsh_core::audit::record("secret", Some(&session), what, verdict);
        match decided {
            (_, Ok(secret)) => Ok(SecretReply::Given(secret)),
            (ApprovalOutcome::Unavailable, Err(Some(why))) => Ok(SecretReply::Unanswerable(why)),
            (outcome, Err(_)) => Ok(SecretReply::Refused(outcome)),
        }
    }
}

/// Config of the approval service.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApprovalConfig {
    /// `ask` (default) or `never`.
    pub policy: String,
    /// The workspace root whose `.dsh-policy.toml` narrows grants (default: the current
    /// directory when the service starts).
    pub workspace_root: Option<String>,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self { policy: "ask".to_owned(), workspace_root: None }
    }
}

/// The validated config of the approval service.
#[derive(Clone, Debug)]
pub struct ValidatedApproval {
    /// The approval policy.
    pub policy: ApprovalPolicy,
    /// The workspace root, as configured.
    pub workspace_root: Option<std::path::PathBuf>,
}

/// Provides `approval` (and the hub) and the `approval:policy` context (order 115).
pub struct ApprovalPlugin;

impl Plugin for ApprovalPlugin {
    const NAME: &'static str = "@deepseek-ai/dsh-user-approval";
    const SHORT_NAME: &'static str = "approval";
    type Deps = (dsh_core::services::SystemPrompt,);
    type Config = ApprovalConfig;
    type Validated = ValidatedApproval;

    fn validate(config: ApprovalConfig) -> Result<ValidatedApproval, ConfigError> {
        let policy = ApprovalPolicy::parse(&config.policy).map_err(ConfigError::new)?;
        Ok(ValidatedApproval { policy, workspace_root: config.workspace_root.map(std::path::PathBuf::from) })
    }

    fn apply(
        scope: &mut PluginScope,
        (prompt,): Handles<Self>,
        config: &ValidatedApproval,
    ) -> Result<(), PluginError> {
        let workspace = config.workspace_root.clone().or_else(|| std::env::current_dir().ok());
        let hub = ApprovalHub::with_policy_files(config.policy, PolicyPaths::from_env(workspace.as_deref()));
        let for_context = Arc::clone(&hub);
        let context = prompt.register_context(
            "approval:policy",
            115.0,
            Arc::new(move |agent: Option<&Arc<Agent>>| {
                agent.map(|a| for_context.context_text(a.session())).unwrap_or_default()
            }),
        )?;
        scope.add(context);
        scope.provide(APPROVAL_HUB, Arc::clone(&hub))?;
        let service: Arc<dyn ApprovalService> = hub;
        scope.provide(APPROVAL, service)
    }
}
