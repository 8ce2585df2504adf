//! Completion notices: the text, the bounded summary, and delivery with a wake budget
//! per exact agent instance.

use std::sync::{Arc, Weak};

use dsh_core::{Agent, AgentMessage, AgentStatus};
use dsh_jobs::JobSnapshot;
use parking_lot::Mutex;
use serde_json::json;

use crate::config::CompletionDelivery;
use crate::render::{byte_budget, retain_head, retain_tail, status_line};

/// The summary bound, in UTF-16 code units (JS string length).
pub const SUMMARY_MAX_UTF16: usize = 120;

fn snapshot_status_line(job: &JobSnapshot) -> String {
    status_line(job.status.as_str(), job.detail.as_deref())
}

/// `<kind> <label> <statusLine>`, bounded to 120 UTF-16 units: when longer, the first 119
/// units followed by `…`. No other normalization.
pub fn completion_summary(job: &JobSnapshot) -> String {
    bounded_summary(format!("{} {} {}", job.kind, job.label, snapshot_status_line(job)))
}

/// `full` bounded to 120 UTF-16 units (the first 119 and `…` when longer).
fn bounded_summary(full: String) -> String {
    if full.encode_utf16().count() <= SUMMARY_MAX_UTF16 {
        return full;
    }
    let mut units = 0;
    let mut out = String::new();
    for c in full.chars() {
        units += c.len_utf16();
        if units > SUMMARY_MAX_UTF16 - 1 {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// `background job <id> (<kind>: <label>) finished <statusLine>. Read its output with job_output.`,
/// degraded to fit the job's `outputLimitBytes` when the producer set one.
pub fn completion_notice(job: &JobSnapshot) -> String {
    let prefix = format!("background job {}", job.id);
    let detail = format!(" ({}: {}) finished {}", job.kind, job.label, snapshot_status_line(job));
    let complete = format!("{prefix}{detail}. Read its output with job_output.");
    let Some(max) = job.output_limit_bytes.map(byte_budget) else { return complete };
    if complete.len() <= max {
        return complete;
    }
    let action = "\nDone; job_output.";
    let omitted = "\n[notice truncated]";
    let fixed = format!("{prefix}{omitted}{action}");
    if fixed.len() <= max {
        if fixed.len() == max {
            return fixed;
        }
        return format!("{prefix}{}{omitted}{action}", retain_head(&detail, max - fixed.len()));
    }
    let compact = format!("{prefix}{action}");
    if compact.len() <= max {
        return compact;
    }
    if action.len() >= max {
        return retain_tail(action, max).to_owned();
    }
    format!("{}{action}", retain_head(&prefix, max - action.len()))
}

/// The longest last line a waiting notice quotes, in characters (longer ones end in `…`).
pub const WAITING_LINE_MAX_CHARS: usize = 80;

/// `background job <id> (<kind>: <label>) is waiting for input after "<last line>". Answer it
/// with job_input.` (the line JSON-quoted, at most [`WAITING_LINE_MAX_CHARS`] characters; without a line, `is waiting for input.`), reduced
/// to `background job <id> is waiting for input.\nAnswer it with job_input.` when longer than
/// the job's `outputLimitBytes`.
pub fn waiting_notice(job: &JobSnapshot, line: Option<&str>) -> String {
    // The line is the command's own text in a message to the model: one quoted line, short.
    let line = line.map(|line| match line.char_indices().nth(WAITING_LINE_MAX_CHARS) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    });
    let line = line.as_deref();
    let after =
        line.map(|line| format!(" after {}", serde_json::Value::String(line.to_owned()))).unwrap_or_default();
    let full = format!(
        "background job {} ({}: {}) is waiting for input{after}. Answer it with job_input.",
        job.id, job.kind, job.label
    );
    match job.output_limit_bytes.map(byte_budget) {
        Some(max) if full.len() > max => {
            let compact =
                format!("background job {} is waiting for input.\nAnswer it with job_input.", job.id);
            if compact.len() <= max { compact } else { retain_head(&compact, max).to_owned() }
        }
        _ => full,
    }
}

/// The user message a waiting notice is delivered as.
pub(crate) fn waiting_message(job: &JobSnapshot, line: Option<&str>) -> AgentMessage {
    AgentMessage {
        text: waiting_notice(job, line),
        source: json!({
            "kind": "plugin",
            "plugin": "tool-jobs",
            "form": "notice",
            "summary": bounded_summary(format!("{} {} [status: waiting for input]", job.kind, job.label)),
        }),
    }
}

/// The user message a notice is delivered as.
pub(crate) fn notice_message(job: &JobSnapshot) -> AgentMessage {
    AgentMessage {
        text: completion_notice(job),
        source: json!({
            "kind": "plugin",
            "plugin": "tool-jobs",
            "form": "notice",
            "summary": completion_summary(job),
        }),
    }
}

struct Budget {
    agent: Weak<Agent>,
    spent: u64,
}

/// Delivers notices and keeps the wake budget of each exact owner instance.
pub(crate) struct Notifier {
    delivery: CompletionDelivery,
    max_wakes: u64,
    budgets: Mutex<Vec<Budget>>,
}

impl Notifier {
    pub(crate) fn new(delivery: CompletionDelivery, max_wakes: u64) -> Arc<Self> {
        Arc::new(Self { delivery, max_wakes, budgets: Mutex::new(Vec::new()) })
    }

    /// The completion listener body.
    pub(crate) fn on_settled(self: &Arc<Self>, job: &JobSnapshot, owner: Option<&Arc<Agent>>) {
        if job.reported {
            return;
        }
        let Some(owner) = owner else { return };
        self.deliver(owner, notice_message(job));
    }

    /// The waiting listener body: `job` (still running) waits for input after `line`.
    pub(crate) fn on_waiting(self: &Arc<Self>, job: &JobSnapshot, line: Option<&str>, owner: &Arc<Agent>) {
        if job.status.is_active() {
            self.deliver(owner, waiting_message(job, line));
        }
    }

    /// Opens a turn for an idle owner (within the wake budget, with `wakeup` delivery), else
    /// joins the owner's next step.
    fn deliver(self: &Arc<Self>, owner: &Arc<Agent>, message: AgentMessage) {
        if self.delivery == CompletionDelivery::Wakeup
            && owner.status() == AgentStatus::Idle
            && self.spend(owner)
        {
            owner.followup(message);
        } else {
            owner.inject(message);
        }
    }

    /// Takes one wake from `owner`'s budget if any is left.
    fn spend(self: &Arc<Self>, owner: &Arc<Agent>) -> bool {
        let mut budgets = self.budgets.lock();
        budgets.retain(|b| b.agent.strong_count() > 0);
        let index = match budgets.iter().position(|b| std::ptr::eq(b.agent.as_ptr(), Arc::as_ptr(owner))) {
            Some(index) => index,
            None => {
                // The budget resets when this exact agent claims a user-authored message.
                let notifier = Arc::downgrade(self);
                owner.on_claim(move |agent, message| {
                    if message.is_user_authored()
                        && let Some(notifier) = notifier.upgrade()
                    {
                        notifier.reset(agent);
                    }
                });
                budgets.push(Budget { agent: Arc::downgrade(owner), spent: 0 });
                budgets.len() - 1
            }
        };
        let budget = &mut budgets[index];
        if budget.spent < self.max_wakes {
            budget.spent += 1;
            true
        } else {
            false
        }
    }

    fn reset(&self, agent: &Agent) {
        let mut budgets = self.budgets.lock();
        for budget in budgets.iter_mut().filter(|b| std::ptr::eq(b.agent.as_ptr(), agent)) {
            budget.spent = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_jobs::JobStatus;

    fn job(label: &str, limit: Option<f64>) -> JobSnapshot {
        JobSnapshot {
            id: "bash-1".into(),
            kind: "bash".into(),
            label: label.into(),
            output_limit_bytes: limit,
            owner_session: Some("s".into()),
            status: JobStatus::Completed,
            detail: Some("exit code: 0".into()),
            started_at: 1,
            finished_at: Some(2),
            reported: false,
        }
    }

    #[test]
    fn summary_is_bounded_in_utf16_units() {
        assert_eq!(
            completion_summary(&job("pnpm test", None)),
            "bash pnpm test [status: completed, exit code: 0]"
        );
        let long = "x".repeat(1000);
        let summary = completion_summary(&job(&long, None));
        assert_eq!(summary, format!("bash {}…", "x".repeat(114)));
        assert_eq!(summary.encode_utf16().count(), 120);
        // An astral character counts two units and is never split.
        let astral = format!("{}😀", "y".repeat(113));
        let summary = completion_summary(&job(&astral, None));
        assert_eq!(summary, format!("bash {}…", "y".repeat(113)));
    }

    #[test]
    fn notice_degrades_within_output_limit() {
        let full = "background job bash-1 (bash: pnpm test) finished [status: completed, exit code: 0]. Read its output with job_output.";
        assert_eq!(completion_notice(&job("pnpm test", None)), full);
        assert_eq!(completion_notice(&job("pnpm test", Some(full.len() as f64))), full);
        assert_eq!(
            completion_notice(&job("pnpm test", Some(70.0))),
            "background job bash-1 (bash: pnpm\n[notice truncated]\nDone; job_output."
        );
        assert_eq!(
            completion_notice(&job("pnpm test", Some(40.0))),
            "background job bash-1\nDone; job_output."
        );
        assert_eq!(completion_notice(&job("pnpm test", Some(25.0))), "backgro\nDone; job_output.");
        assert_eq!(completion_notice(&job("pnpm test", Some(5.0))), "tput.");
    }

    #[test]
    fn waiting_notice_names_the_job_and_its_last_line() {
        let mut running = job("read -p 'name? ' x", None);
        running.status = JobStatus::Running;
        assert_eq!(
            waiting_notice(&running, Some("name? ")),
            "background job bash-1 (bash: read -p 'name? ' x) is waiting for input after \"name? \". Answer it with job_input."
        );
        assert_eq!(
            waiting_notice(&running, None),
            "background job bash-1 (bash: read -p 'name? ' x) is waiting for input. Answer it with job_input."
        );
        running.output_limit_bytes = Some(80.0);
        assert_eq!(
            waiting_notice(&running, Some("name? ")),
            "background job bash-1 is waiting for input.\nAnswer it with job_input."
        );
        running.output_limit_bytes = None;
        let long = "x".repeat(WAITING_LINE_MAX_CHARS + 1);
        assert!(waiting_notice(&running, Some(&long)).contains(&format!("after \"{}…\".", &long[1..])));
        let message = waiting_message(&running, Some("name? "));
        assert_eq!(message.source["summary"], "bash read -p 'name? ' x [status: waiting for input]");
    }
}
