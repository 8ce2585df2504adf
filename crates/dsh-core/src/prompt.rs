//! Ordered system-prompt sections and per-request runtime contexts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::agent::Agent;
use crate::context::{Disposer, ServiceKey};

/// Service key of the system prompt.
pub const SYSTEM_PROMPT: ServiceKey<Arc<SystemPrompt>> = ServiceKey::new("systemPrompt");

/// One named section.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptSection {
    /// The section's unique name (e.g. `tool:bash`).
    pub name: String,
    /// Sort key: sections render in ascending order (ties: registration order).
    pub order: f64,
    /// The section text.
    pub text: String,
}

/// Renders a runtime context for the agent a request is assembled for (`None`: no agent).
pub type ContextRenderer = Arc<dyn Fn(Option<&Arc<Agent>>) -> String + Send + Sync>;

/// Errors registering sections.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// A section or context with this name is already registered.
    #[error("prompt section \"{0}\" is already registered")]
    Duplicate(String),
    /// The order given for this section or context is not finite.
    #[error("prompt section \"{0}\" order must be a finite number")]
    Order(String),
}

struct Entry<T> {
    seq: u64,
    name: String,
    order: f64,
    item: T,
}

/// The system prompt: static sections plus dynamic runtime contexts.
pub struct SystemPrompt {
    seq: AtomicU64,
    include_runtime_context: bool,
    sections: Arc<Mutex<Vec<Entry<String>>>>,
    contexts: Arc<Mutex<Vec<Entry<ContextRenderer>>>>,
}

/// The built-in identity line.
pub const HARNESS_IDENTITY: &str = "You are an AI agent powered by DeepSeek Harness.";
/// Name of the built-in section holding [`HARNESS_IDENTITY`].
pub const HARNESS_IDENTITY_SECTION: &str = "harness:identity";
/// Name of the built-in section holding the deployment's persona.
pub const PERSONA_SECTION: &str = "deployment:persona";

impl SystemPrompt {
    /// A prompt with the built-in sections (`harness:identity` at -100 unless disabled,
    /// `deployment:persona` at 0).
    pub fn new(include_harness_identity: bool, include_runtime_context: bool, persona: &str) -> Arc<Self> {
        let prompt = Arc::new(Self {
            seq: AtomicU64::new(0),
            include_runtime_context,
            sections: Arc::new(Mutex::new(Vec::new())),
            contexts: Arc::new(Mutex::new(Vec::new())),
        });
        if include_harness_identity {
            prompt.push_section(HARNESS_IDENTITY_SECTION, -100.0, HARNESS_IDENTITY);
        }
        prompt.push_section(PERSONA_SECTION, 0.0, persona);
        prompt
    }

    fn push_section(&self, name: &str, order: f64, text: &str) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.sections.lock().push(Entry { seq, name: name.to_owned(), order, item: text.to_owned() });
    }

    /// Registers a section; names are unique; the disposer removes it.
    pub fn register_section(&self, name: &str, order: f64, text: &str) -> Result<Disposer, PromptError> {
        if !order.is_finite() {
            return Err(PromptError::Order(name.to_owned()));
        }
        if self.sections.lock().iter().any(|e| e.name == name) {
            return Err(PromptError::Duplicate(name.to_owned()));
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.sections.lock().push(Entry { seq, name: name.to_owned(), order, item: text.to_owned() });
        let sections = Arc::clone(&self.sections);
        Ok(Disposer::new(move || sections.lock().retain(|e| e.seq != seq)))
    }

    /// Registers a runtime context (rendered per request, never a system-prompt section).
    pub fn register_context(
        &self,
        name: &str,
        order: f64,
        render: ContextRenderer,
    ) -> Result<Disposer, PromptError> {
        if !order.is_finite() {
            return Err(PromptError::Order(name.to_owned()));
        }
        if self.contexts.lock().iter().any(|e| e.name == name) {
            return Err(PromptError::Duplicate(name.to_owned()));
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.contexts.lock().push(Entry { seq, name: name.to_owned(), order, item: render });
        let contexts = Arc::clone(&self.contexts);
        Ok(Disposer::new(move || contexts.lock().retain(|e| e.seq != seq)))
    }

    /// Every section in ascending order (ties: registration order), empty ones included.
    pub fn sections(&self) -> Vec<PromptSection> {
        let mut entries: Vec<(u64, PromptSection)> = self
            .sections
            .lock()
            .iter()
            .map(|e| (e.seq, PromptSection { name: e.name.clone(), order: e.order, text: e.item.clone() }))
            .collect();
        entries.sort_by(|a, b| a.1.order.total_cmp(&b.1.order).then(a.0.cmp(&b.0)));
        entries.into_iter().map(|(_, s)| s).collect()
    }

    /// The assembled system prompt: non-empty section texts joined by blank lines.
    pub fn render(&self) -> String {
        self.render_excluding(&[])
    }

    /// [`render`](Self::render) without the sections named in `excluded` (a host that describes
    /// the tools to someone else's agent leaves out the identity and persona sections).
    pub fn render_excluding(&self, excluded: &[&str]) -> String {
        self.sections()
            .into_iter()
            .filter(|s| !s.text.is_empty() && !excluded.contains(&s.name.as_str()))
            .map(|s| s.text)
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// Runtime contexts for `agent` in order, as `(name, text)`; empty texts dropped.
    pub fn contexts(&self, agent: Option<&Arc<Agent>>) -> Vec<(String, String)> {
        if !self.include_runtime_context {
            return Vec::new();
        }
        let mut entries: Vec<(u64, f64, String, ContextRenderer)> = self
            .contexts
            .lock()
            .iter()
            .map(|e| (e.seq, e.order, e.name.clone(), Arc::clone(&e.item)))
            .collect();
        entries.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        entries
            .into_iter()
            .map(|(_, _, name, render)| (name, render(agent)))
            .filter(|(_, text)| !text.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_sort_by_order_then_registration() {
        let p = SystemPrompt::new(true, true, "");
        let _a = p.register_section("test:after", 106.0, "after").expect("ok");
        let _b = p.register_section("test:before", 104.0, "before").expect("ok");
        let names: Vec<String> = p.sections().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["harness:identity", "deployment:persona", "test:before", "test:after"]);
        assert_eq!(p.render(), format!("{HARNESS_IDENTITY}\n\nbefore\n\nafter"));
        assert_eq!(
            p.register_section("test:after", 1.0, "x").err(),
            Some(PromptError::Duplicate("test:after".into()))
        );
    }
}
