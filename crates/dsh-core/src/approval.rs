//! The approval seam: one-shot requests for the user's consent.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::abort::AbortSignal;
use crate::agent::Agent;
use crate::context::ServiceKey;

/// The closed vocabulary of approval outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    AllowedOnce,
    Rejected,
    Cancelled,
    Unavailable,
}

impl ApprovalOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::AllowedOnce => "allowed-once",
            ApprovalOutcome::Rejected => "rejected",
            ApprovalOutcome::Cancelled => "cancelled",
            ApprovalOutcome::Unavailable => "unavailable",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::AllowedOnce, Self::Rejected, Self::Cancelled, Self::Unavailable]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One approval request.
#[derive(Clone, Debug)]
pub struct ApprovalRequest {
    pub agent: Arc<Agent>,
    pub tool_name: String,
    pub call_id: Option<String>,
    pub reason: Option<String>,
    pub signal: Option<AbortSignal>,
}

/// The approval service (`approval`). `Err` carries a message that becomes the tool error
/// (for example a request made outside an open turn).
#[async_trait::async_trait]
pub trait ApprovalService: Send + Sync {
    async fn request(&self, request: ApprovalRequest) -> Result<ApprovalOutcome, String>;

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
