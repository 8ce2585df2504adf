//! The three job tools: definitions, bodies, renderers and presenters.

use std::sync::Arc;

use dsh_core::{ContentBlock, Schema, Tool, ToolError, ToolExec, ToolParams, ToolResult, ToolSpec};
use dsh_jobs::{JobInputs, JobRegistry, KillOutcome};
use serde_json::{Value, json};

use crate::render::{
    WAITING_FOR_INPUT, byte_budget, fit_with_suffix, job_status_line, public_job_schema,
    public_job_schema_with,
};

/// `job_output` description (exact).
pub const JOB_OUTPUT_DESCRIPTION: &str = "Read a background job. Stream jobs return only output since the previous read; final-output jobs return their result after settlement. Every response ends with `[status: ...]`. Reads are non-blocking unless `wait: true`, which waits up to the configured cap.";
/// `job_list` description (exact).
pub const JOB_LIST_DESCRIPTION: &str =
    "List your background jobs (running and finished) with their ids, kinds, and statuses.";
/// `job_kill` description (exact).
pub const JOB_KILL_DESCRIPTION: &str = "Request cancellation of a running background job by job id. Returns immediately; the job settles as killed once its work actually stops.";

pub(crate) const JOB_ID_DESCRIPTION: &str = "Job id returned by the tool that started the background work.";
const WAIT_DESCRIPTION: &str = "Block until the job reaches a terminal status or the timeout expires. A timed-out wait returns [status: running] and leaves the job alive.";
const TIMEOUT_DESCRIPTION: &str = "Max wait in milliseconds (only meaningful with wait: true). Defaults to the configured wait timeout; capped by the configured maximum.";
const TAIL_LINES_DESCRIPTION: &str = "Show only the last N lines of the new output; earlier new lines are still consumed and counted in a note.";
const REASON_DESCRIPTION: &str = "Optional short reason, recorded in the log and forwarded to the job.";

/// The `job_id` argument, refused when empty.
pub(crate) fn job_id(args: &Value) -> Result<&str, ToolError> {
    let id = args.get("job_id").and_then(Value::as_str).unwrap_or_default();
    if id.is_empty() {
        return Err(ToolError::plain(format!(
            "invalid job_id: expected a non-empty string, got {}",
            Value::String(id.to_owned())
        )));
    }
    Ok(id)
}

pub(crate) fn single_text(text: String) -> Vec<ContentBlock> {
    vec![ContentBlock::text(text)]
}

/// A generic card, with `rawInput` only when given.
pub(crate) fn generic_card(title: String, kind: &str, raw_input: Option<&str>) -> Value {
    let mut card = json!({ "card": "generic", "title": title, "kind": kind });
    if let Some(raw) = raw_input {
        card["rawInput"] = json!(raw);
    }
    card
}

/// Output schema of a read (`job_output`, `job_input`): `{text, job}`; `input` adds the
/// `waiting for input` status.
pub(crate) fn read_schema(jobs: &dyn JobRegistry, input: bool) -> Schema {
    let job = public_job_schema_with(jobs.journaled(), input);
    Schema::object(vec![("text", Schema::string(), true), ("job", job, true)], false)
}

/// The text of a read (`{text, job}`): the output, or `(no new output)`, then the status line.
pub(crate) fn render_read(value: &Value) -> Vec<ContentBlock> {
    let text = value["text"].as_str().unwrap_or_default();
    let body = if text.is_empty() { "(no new output)" } else { text };
    let separator = if body.ends_with('\n') { "" } else { "\n" };
    single_text(format!("{body}{separator}{}", job_status_line(&value["job"])))
}

/// A running job's public value, with status `waiting for input` while it is blocked reading
/// the input its owner writes.
pub(crate) fn with_waiting(mut job: Value, inputs: Option<&JobInputs>) -> Value {
    let waiting = inputs.is_some_and(|inputs| {
        job["status"] == json!("running") && job["id"].as_str().is_some_and(|id| inputs.show_waiting(id))
    });
    if waiting {
        job["status"] = json!(WAITING_FOR_INPUT);
    }
    job
}

/// The byte budget of the job a successful result is about, when its producer set one.
fn job_limit(jobs: &dyn JobRegistry, exec: &ToolExec, result: &ToolResult) -> Option<usize> {
    if result.is_error {
        return None;
    }
    let id = result.value.as_ref()?.get("job")?.get("id")?.as_str()?;
    jobs.get(id, exec.agent.as_ref()).ok()?.output_limit_bytes.map(byte_budget)
}

/// Single-text results tail-bounded with `\n[result truncated]`; other shapes untouched.
fn bound_single_text(result: &ToolResult, max: usize) -> Option<Vec<ContentBlock>> {
    let text = result.single_text()?;
    Some(single_text(fit_with_suffix(text, "", max, "\n[result truncated]")))
}

/// Keeps the last `n` lines of `text`; the dropped ones are counted in a leading note.
fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.len() <= n {
        return text.to_owned();
    }
    let hidden = lines.len() - n;
    format!("[… {hidden} earlier lines not shown]\n{}", lines[hidden..].concat())
}

/// `job_output`: a (possibly waiting) consuming read.
pub struct JobOutputTool {
    jobs: Arc<dyn JobRegistry>,
    inputs: Option<Arc<JobInputs>>,
    spec: ToolSpec,
    wait_default_ms: f64,
    wait_cap_ms: f64,
}

impl JobOutputTool {
    /// The tool over `jobs`, waiting `wait_default_ms` unless told otherwise and never beyond
    /// `wait_cap_ms`; `tail_lines` advertises the optional `tail_lines` parameter.
    pub fn new(jobs: Arc<dyn JobRegistry>, wait_default_ms: f64, wait_cap_ms: f64, tail_lines: bool) -> Self {
        let mut params = ToolParams::new()
            .required("job_id", Schema::string().describe(JOB_ID_DESCRIPTION))
            .optional("wait", Schema::boolean().describe(WAIT_DESCRIPTION))
            .optional("timeout_ms", Schema::number().describe(TIMEOUT_DESCRIPTION));
        if tail_lines {
            params = params.optional("tail_lines", Schema::integer().describe(TAIL_LINES_DESCRIPTION));
        }
        let output = read_schema(jobs.as_ref(), false);
        let spec = ToolSpec::new("job_output", JOB_OUTPUT_DESCRIPTION, params, output);
        Self { jobs, inputs: None, spec, wait_default_ms, wait_cap_ms }
    }

    /// With job input enabled: a running job blocked reading its input shows
    /// `[status: waiting for input]` (and the output schema names that status).
    pub fn with_inputs(mut self, inputs: Arc<JobInputs>) -> Self {
        let output = read_schema(self.jobs.as_ref(), true);
        self.spec = ToolSpec::new("job_output", JOB_OUTPUT_DESCRIPTION, self.spec.parameters.clone(), output);
        self.inputs = Some(inputs);
        self
    }

    fn tail_arg(&self, args: &Value) -> Result<Option<usize>, ToolError> {
        if !self.spec.parameters.names().any(|n| n == "tail_lines") {
            return Ok(None);
        }
        match args.get("tail_lines") {
            None => Ok(None),
            Some(value) => match value.as_f64() {
                Some(n) if n >= 1.0 => Ok(Some(if n >= usize::MAX as f64 { usize::MAX } else { n as usize })),
                _ => Err(ToolError::plain(format!(
                    "invalid tail_lines: expected a positive integer, got {}",
                    dsh_core::json::js_json_text(value)
                ))),
            },
        }
    }
}

#[async_trait::async_trait]
impl Tool for JobOutputTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        render_read(value)
    }

    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        let id = job_id(&args)?;
        let tail = self.tail_arg(&args)?;
        let caller = exec.agent.as_ref();
        if args.get("wait") == Some(&Value::Bool(true)) {
            let requested = args.get("timeout_ms").and_then(Value::as_f64).unwrap_or(self.wait_default_ms);
            let timeout = requested.min(self.wait_cap_ms);
            // A timed-out wait is not an error: the read below reports the live status.
            self.jobs.wait(id, timeout, caller, Some(exec.signal.clone())).await?;
        }
        // The read consumes: it is the call's point of no return. A call cancelled before it
        // reads nothing (the output stays for the next read); one that reads cannot be
        // cancelled any more, so its result, and the output in it, reaches the caller.
        if !exec.signal.seal() {
            return Err(ToolError::aborted());
        }
        let (text, job) = self.jobs.read(id, caller)?;
        let text = match tail {
            Some(n) => tail_lines(&text, n),
            None => text,
        };
        Ok(json!({ "text": text, "job": with_waiting(job.public_json(), self.inputs.as_deref()) }))
    }

    fn present_call(&self, args: &Value) -> Option<Value> {
        let id = args.get("job_id")?.as_str()?;
        self.spec
            .parameters
            .accepts(args)
            .then(|| generic_card(format!("Read output from background job {id}"), "read", Some(id)))
    }

    fn finalize_content(&self, exec: &ToolExec, result: &ToolResult) -> Option<Vec<ContentBlock>> {
        let max = job_limit(self.jobs.as_ref(), exec, result)?;
        let value = result.value.as_ref()?;
        let text = value["text"].as_str().unwrap_or_default();
        let body = if text.is_empty() { "(no new output)" } else { text };
        let content = body.strip_suffix('\n').unwrap_or(body);
        let suffix = format!("\n{}", job_status_line(&value["job"]));
        if result.single_text() == Some(format!("{content}{suffix}").as_str()) {
            return Some(single_text(fit_with_suffix(content, &suffix, max, "\n[output truncated]")));
        }
        bound_single_text(result, max)
    }
}

/// `job_list`: the caller's jobs and every unowned one.
pub struct JobListTool {
    jobs: Arc<dyn JobRegistry>,
    inputs: Option<Arc<JobInputs>>,
    spec: ToolSpec,
}

impl JobListTool {
    /// The `job_list` tool over the given job registry.
    pub fn new(jobs: Arc<dyn JobRegistry>) -> Self {
        let spec = ToolSpec::new(
            "job_list",
            JOB_LIST_DESCRIPTION,
            ToolParams::new(),
            Schema::array(public_job_schema(jobs.journaled())),
        );
        Self { jobs, inputs: None, spec }
    }

    /// With job input enabled: running jobs blocked reading their input are listed as
    /// `waiting for input`.
    pub fn with_inputs(mut self, inputs: Arc<JobInputs>) -> Self {
        let jobs = Schema::array(public_job_schema_with(self.jobs.journaled(), true));
        self.spec = ToolSpec::new("job_list", JOB_LIST_DESCRIPTION, ToolParams::new(), jobs);
        self.inputs = Some(inputs);
        self
    }
}

#[async_trait::async_trait]
impl Tool for JobListTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        let jobs = value.as_array().map(Vec::as_slice).unwrap_or_default();
        if jobs.is_empty() {
            return single_text("(no background jobs)".to_owned());
        }
        let lines: Vec<String> = jobs
            .iter()
            .map(|job| {
                let field = |k: &str| job[k].as_str().unwrap_or_default().to_owned();
                let line = format!(
                    "{} [{}] {} \u{2014} {}",
                    field("id"),
                    field("kind"),
                    field("status"),
                    field("label")
                );
                // A lost job's detail is all there is to know about it (where its output went).
                match job["status"].as_str() {
                    Some("lost") => format!("{line}\n  {}", job_status_line(job)),
                    _ => line,
                }
            })
            .collect();
        single_text(lines.join("\n"))
    }

    async fn execute(&self, _args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        let jobs = self.jobs.list(exec.agent.as_ref());
        Ok(Value::Array(jobs.iter().map(|j| with_waiting(j.public_json(), self.inputs.as_deref())).collect()))
    }

    fn present_call(&self, args: &Value) -> Option<Value> {
        self.spec
            .parameters
            .accepts(args)
            .then(|| generic_card("List background jobs".to_owned(), "read", None))
    }
}

/// `job_kill`: requests cancellation; never consumes unread output.
pub struct JobKillTool {
    jobs: Arc<dyn JobRegistry>,
    spec: ToolSpec,
}

impl JobKillTool {
    /// The `job_kill` tool over the given job registry.
    pub fn new(jobs: Arc<dyn JobRegistry>) -> Self {
        let params = ToolParams::new()
            .required("job_id", Schema::string().describe(JOB_ID_DESCRIPTION))
            .optional("reason", Schema::string().describe(REASON_DESCRIPTION));
        let outcomes = vec![json!("cancellation-requested"), json!("already-finished")];
        let output = Schema::object(
            vec![
                ("outcome", Schema::string().enumerated(outcomes), true),
                ("job", public_job_schema(jobs.journaled()), true),
            ],
            false,
        );
        Self { jobs, spec: ToolSpec::new("job_kill", JOB_KILL_DESCRIPTION, params, output) }
    }
}

#[async_trait::async_trait]
impl Tool for JobKillTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        let job = &value["job"];
        let id = job["id"].as_str().unwrap_or_default();
        single_text(match value["outcome"].as_str() {
            Some("already-finished") => format!("job {id} had already finished {}", job_status_line(job)),
            _ => format!("requested cancellation of job {id}"),
        })
    }

    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        let id = job_id(&args)?;
        let caller = exec.agent.as_ref();
        let reason = args.get("reason").and_then(Value::as_str).map(str::to_owned);
        let outcome = self.jobs.kill(id, caller, reason)?;
        let job = self.jobs.get(id, caller)?;
        let outcome = match outcome {
            KillOutcome::Requested => "cancellation-requested",
            KillOutcome::AlreadyFinished => "already-finished",
        };
        Ok(json!({ "outcome": outcome, "job": job.public_json() }))
    }

    fn present_call(&self, args: &Value) -> Option<Value> {
        let id = args.get("job_id")?.as_str()?;
        self.spec
            .parameters
            .accepts(args)
            .then(|| generic_card(format!("Kill background job {id}"), "execute", Some(id)))
    }

    fn finalize_content(&self, exec: &ToolExec, result: &ToolResult) -> Option<Vec<ContentBlock>> {
        let max = job_limit(self.jobs.as_ref(), exec, result)?;
        bound_single_text(result, max)
    }
}

#[cfg(test)]
mod tests {
    use super::tail_lines;

    #[test]
    fn tail_lines_counts_hidden_lines() {
        assert_eq!(tail_lines("a\nb\nc\n", 5), "a\nb\nc\n");
        assert_eq!(tail_lines("a\nb\nc\n", 2), "[… 1 earlier lines not shown]\nb\nc\n");
        assert_eq!(tail_lines("a\nb\nc", 1), "[… 2 earlier lines not shown]\nc");
    }
}
