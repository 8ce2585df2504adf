//! The approval seam: one-shot requests for the user's consent.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::abort::AbortSignal;
use crate::agent::Agent;
use crate::context::ServiceKey;
use crate::session::SessionError;

/// The closed vocabulary of approval outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    /// The user allowed this one call (`allowed-once`).
    AllowedOnce,
    /// The user rejected the call (`rejected`).
    Rejected,
    /// The request was cancelled before an answer (`cancelled`).
    Cancelled,
    /// No approval channel could answer (`unavailable`).
    Unavailable,
}

impl ApprovalOutcome {
    /// The wire spelling (`allowed-once`, `rejected`, `cancelled`, `unavailable`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::AllowedOnce => "allowed-once",
            ApprovalOutcome::Rejected => "rejected",
            ApprovalOutcome::Cancelled => "cancelled",
            ApprovalOutcome::Unavailable => "unavailable",
        }
    }

    /// Parses the wire spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::AllowedOnce, Self::Rejected, Self::Cancelled, Self::Unavailable]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One approval request.
#[derive(Clone, Debug)]
pub struct ApprovalRequest {
    /// The agent whose call asks.
    pub agent: Arc<Agent>,
    /// The name of the tool being called.
    pub tool_name: String,
    /// The id of the tool call, when there is one.
    pub call_id: Option<String>,
    /// Why the call needs approval, as the tool or policy words it.
    pub reason: Option<String>,
    /// The call's abort signal; firing it cancels the request.
    pub signal: Option<AbortSignal>,
    /// What the user approves when the request is about a command (a sandbox escalation, a
    /// network destination): every answerer shows it. `None` for a request about a tool call
    /// as a whole.
    pub subject: Option<ApprovalSubject>,
}

/// The facts of a command's approval request, as typed fields every answerer shows. The
/// texts came from the model or from the command: an answerer shows them with their control
/// characters escaped, never raw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalSubject {
    /// The command exactly as the model wrote it.
    pub command: String,
    /// The directory the command starts in.
    pub cwd: String,
    /// What is asked for it.
    pub asked: ApprovalAsk,
    /// The model's justification, when it gave one.
    pub justification: Option<String>,
    /// Further facts the user must see to know what runs (what shell state the call starts
    /// with), one sentence each.
    pub notes: Vec<String>,
}

/// What a command's approval request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalAsk {
    /// One run under a wider sandbox mode (its wire name, such as `workspace-write`).
    Mode(String),
    /// A connection to a destination outside the network allowlist (`host:port`).
    Host(String),
}

/// A secret the user typed for a command (askpass): a password, a passphrase. Its `Debug`
/// never shows it, and its bytes are overwritten when it is dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps the bytes the user gave.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// The secret's bytes, for the one program it is meant for.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.fill(0);
        // Keeps the overwrite from being optimised away as a dead store.
        std::hint::black_box(&self.0);
    }
}

/// One request for a secret a command asks the user for (askpass): the answer goes to the
/// command's askpass program only, never to the model, the output or the session log.
#[derive(Clone, Debug)]
pub struct SecretRequest {
    /// The agent whose call runs the command.
    pub agent: Arc<Agent>,
    /// The name of the tool whose command asks.
    pub tool_name: String,
    /// The id of the tool call, when there is one.
    pub call_id: Option<String>,
    /// The prompt the command gave its askpass program (its own words, untrusted).
    pub prompt: String,
    /// The call's abort signal; firing it cancels the request.
    pub signal: Option<AbortSignal>,
}

/// How a secret request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretReply {
    /// The user typed this secret.
    Given(Secret),
    /// No secret: `rejected`, `cancelled` or `unavailable` (never `allowed-once`).
    Refused(ApprovalOutcome),
    /// No secret (outcome `unavailable`) because the one who would be asked cannot take a
    /// secret, and why: for the asking program to tell its user (no secret is in it).
    Unanswerable(String),
}

/// Why an approval request could not be decided at all (as opposed to an outcome such as
/// `rejected`). Its `Display` becomes the tool error's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// The agent's session has no open turn, so the request's audit events could not be
    /// turn-enclosed; nobody was asked.
    #[error(
        "approval.request() outside an open turn: the approval/asked + approval/decided audit pair must be turn-enclosed (a bare event between turns is crash-tail garbage on reload). Ask from inside the turn that needs the decision."
    )]
    OutsideTurn,
    /// Recording an audit event (`approval/asked`, `approval/decided`) in the session failed.
    #[error(transparent)]
    Audit(#[from] SessionError),
    /// A provider's own failure, carried verbatim as its message.
    #[error("{0}")]
    Provider(String),
}

/// An undecided request fails the call with a plain tool error (no name or code).
impl From<ApprovalError> for crate::error::ToolError {
    fn from(error: ApprovalError) -> Self {
        crate::error::ToolError::plain(error.to_string())
    }
}

/// The approval service (`approval`). `Err` becomes the tool error (for example a request
/// made outside an open turn).
#[async_trait::async_trait]
pub trait ApprovalService: Send + Sync {
    /// Asks for consent to one call; an outcome is the answer, an `Err` means no decision.
    async fn request(&self, request: ApprovalRequest) -> Result<ApprovalOutcome, ApprovalError>;

    /// Asks the user for a secret a command needs (askpass). The default, for services that
    /// cannot ask secret questions, refuses with `unavailable`.
    async fn request_secret(&self, request: SecretRequest) -> Result<SecretReply, ApprovalError> {
        let _ = request;
        Ok(SecretReply::Refused(ApprovalOutcome::Unavailable))
    }

    /// Whether a request on behalf of `agent` (`None`: a call without an agent) can reach
    /// someone who might allow it. `false` only when it is certain that no such answer can
    /// come: prompts are disabled for the agent's session, or no channel that could answer its
    /// requests exists. Consumers use it to stop suggesting an approval round trip that must
    /// fail. The default is `true`: when in doubt, an answer may come.
    fn can_answer(&self, _agent: Option<&Agent>) -> bool {
        true
    }
}

/// Service key of the approval service.
pub const APPROVAL: ServiceKey<Arc<dyn ApprovalService>> = ServiceKey::new("approval");

/// Provided (as `true`) by a host that composes no approval service and no other way to
/// answer one, and knows that none can appear: no approval answer can come for any call of
/// the composition. Consumers then stop suggesting approval round trips. Absent means
/// nothing is known; a composition with an approval service asks it
/// ([`ApprovalService::can_answer`]) instead.
pub const APPROVAL_UNREACHABLE: ServiceKey<bool> = ServiceKey::new("approvalUnreachable");
