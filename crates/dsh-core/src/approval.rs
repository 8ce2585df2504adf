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
}

/// Service key of the approval service.
pub const APPROVAL: ServiceKey<Arc<dyn ApprovalService>> = ServiceKey::new("approval");
