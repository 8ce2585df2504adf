//! `job_input`: text and named keys to a running job's stdin, then what the job printed.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::{ContentBlock, Schema, Tool, ToolError, ToolExec, ToolParams, ToolSpec};
use dsh_jobs::{JobInputs, JobRegistry};
use serde_json::{Value, json};

use crate::render::job_status_line;
use crate::tools::{JOB_ID_DESCRIPTION, generic_card, job_id, read_schema, render_read, with_waiting};

/// `job_input` description (exact).
pub const JOB_INPUT_DESCRIPTION: &str = "Send input to one of your running background jobs and read what it printed next. Use it when job_output or job_list shows [status: waiting for input] (a prompt such as `continue? ` or a REPL): `text` is written as is (end a line with \\n), `keys` are named keys sent after it (Enter, Tab, Escape, Backspace, Up, Down, Left, Right, Home, End, Ctrl-A to Ctrl-Z; Ctrl-C interrupts the job, Ctrl-D ends its input), `close_stdin: true` ends its input after them. On a job started with tty: true they are typed on its terminal (Enter is a carriage return; Ctrl-D ends input at the start of a line). Returns the output since the previous read, like job_output, once the job waits again, ends, or goes quiet.";

const TEXT_DESCRIPTION: &str = "Text written to the job's stdin as is.";
const KEYS_DESCRIPTION: &str = "Named keys sent after the text, in order.";
const CLOSE_DESCRIPTION: &str =
    "End the job's input (it reads end of file; on a terminal, Ctrl-D is typed) after the text and keys.";

/// The named keys and what each sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Bytes(&'static [u8]),
    /// A control character (`Ctrl-A` is 1, … `Ctrl-Z` is 26).
    Control(u8),
    Interrupt,
    EndOfInput,
}

/// `Ctrl-A` … `Ctrl-Z`, in order.
const CONTROL_KEYS: [&str; 26] = [
    "Ctrl-A", "Ctrl-B", "Ctrl-C", "Ctrl-D", "Ctrl-E", "Ctrl-F", "Ctrl-G", "Ctrl-H", "Ctrl-I", "Ctrl-J",
    "Ctrl-K", "Ctrl-L", "Ctrl-M", "Ctrl-N", "Ctrl-O", "Ctrl-P", "Ctrl-Q", "Ctrl-R", "Ctrl-S", "Ctrl-T",
    "Ctrl-U", "Ctrl-V", "Ctrl-W", "Ctrl-X", "Ctrl-Y", "Ctrl-Z",
];

/// The key `name`, as typed on a terminal (`terminal`) or written to a pipe: `Enter` is `\r`
/// on a terminal and `\n` on a pipe; on a pipe, `Ctrl-C` signals `SIGINT` and `Ctrl-D` closes
/// the input, while on a terminal both are control characters for its line discipline (the
/// job's [`JobInput`](dsh_jobs::JobInput) knows which it runs on and acts accordingly).
fn key(name: &str, terminal: bool) -> Option<Key> {
    Some(match name {
        "Enter" if terminal => Key::Bytes(b"\r"),
        "Enter" => Key::Bytes(b"\n"),
        "Tab" => Key::Bytes(b"\t"),
        "Escape" => Key::Bytes(b"\x1b"),
        "Backspace" => Key::Bytes(b"\x7f"),
        "Up" => Key::Bytes(b"\x1b[A"),
        "Down" => Key::Bytes(b"\x1b[B"),
        "Right" => Key::Bytes(b"\x1b[C"),
        "Left" => Key::Bytes(b"\x1b[D"),
        "Home" => Key::Bytes(b"\x1b[H"),
        "End" => Key::Bytes(b"\x1b[F"),
        "Ctrl-C" => Key::Interrupt,
        "Ctrl-D" => Key::EndOfInput,
        _ => {
            let index = CONTROL_KEYS.iter().position(|k| *k == name)?;
            Key::Control(index as u8 + 1)
        }
    })
}

const KEY_NAMES: &str = "Enter, Tab, Escape, Backspace, Up, Down, Left, Right, Home, End, Ctrl-A to Ctrl-Z";

/// How long the job may stay quiet before `job_input` returns what it printed.
const SETTLE: Duration = Duration::from_millis(300);
/// The longest `job_input` waits for the job to react.
const MAX_WAIT: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(25);

/// `job_input`: writes to a running job's stdin (its owner only).
pub struct JobInputTool {
    jobs: Arc<dyn JobRegistry>,
    inputs: Arc<JobInputs>,
    spec: ToolSpec,
}

impl JobInputTool {
    /// The `job_input` tool over the given registry and input registry.
    pub fn new(jobs: Arc<dyn JobRegistry>, inputs: Arc<JobInputs>) -> Self {
        let params = ToolParams::new()
            .required("job_id", Schema::string().describe(JOB_ID_DESCRIPTION))
            .optional("text", Schema::string().describe(TEXT_DESCRIPTION))
            .optional("keys", Schema::array(Schema::string()).describe(KEYS_DESCRIPTION))
            .optional("close_stdin", Schema::boolean().describe(CLOSE_DESCRIPTION));
        let output = read_schema(jobs.as_ref(), true);
        Self { jobs, inputs, spec: ToolSpec::new("job_input", JOB_INPUT_DESCRIPTION, params, output) }
    }

    /// Waits until the job waits for input again, ends, or prints nothing for [`SETTLE`].
    async fn settle(&self, id: &str, exec: &ToolExec) {
        let started = tokio::time::Instant::now();
        let mut quiet_since = started;
        let mut last_line = None;
        loop {
            tokio::time::sleep(POLL).await;
            let now = tokio::time::Instant::now();
            let running = self.jobs.get(id, exec.agent.as_ref()).is_ok_and(|job| job.status.is_active());
            let input = self.inputs.get(id);
            let line = input.as_ref().and_then(|i| i.latest_line());
            if line != last_line {
                last_line = line;
                quiet_since = now;
            }
            // The /proc look is made only once the job has had time to read what was sent.
            let min_elapsed = now - started >= POLL * 4;
            let waiting = min_elapsed && input.is_some_and(|i| i.waiting());
            if !running
                || waiting
                || now - quiet_since >= SETTLE
                || now - started >= MAX_WAIT
                || exec.signal.is_aborted()
            {
                return;
            }
        }
    }
}

#[async_trait::async_trait]
impl Tool for JobInputTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn render(&self, _args: &Value, value: &Value) -> Vec<ContentBlock> {
        render_read(value)
    }

    async fn execute(&self, args: Value, exec: ToolExec) -> Result<Value, ToolError> {
        let id = job_id(&args)?;
        let caller = exec.agent.as_ref();
        // The owner fence, with the job tools' own messages.
        let job = self.jobs.get(id, caller)?;
        let text = args.get("text").and_then(Value::as_str).unwrap_or_default();
        let names: Vec<&str> = args
            .get("keys")
            .and_then(Value::as_array)
            .map(|keys| keys.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // Names are checked before anything else, so a typo is reported the same way
        // whatever the job's state.
        if let Some(unknown) = names.iter().find(|name| key(name, false).is_none()) {
            return Err(ToolError::plain(format!(
                "unknown key {}: expected one of {KEY_NAMES}",
                json!(unknown)
            )));
        }
        let close = args.get("close_stdin") == Some(&Value::Bool(true));
        if !job.status.is_active() {
            return Err(ToolError::plain(format!(
                "job {id} takes no more input: it has ended {}",
                job_status_line(&job.public_json())
            )));
        }
        let Some(input) = self.inputs.get(id) else {
            return Err(ToolError::plain(format!(
                "job {id} takes no input: it was not started with job input enabled"
            )));
        };
        let terminal = input.terminal();
        let keys: Vec<Key> = names.iter().filter_map(|name| key(name, terminal)).collect();
        self.inputs.note_input(id);
        let refused = |why: String| ToolError::plain(format!("could not write to job {id}: {why}"));
        if !text.is_empty() {
            input.write(text.as_bytes()).map_err(refused)?;
        }
        for key in keys {
            match key {
                Key::Bytes(bytes) => input.write(bytes).map_err(refused)?,
                Key::Control(byte) => input.write(&[byte]).map_err(refused)?,
                Key::Interrupt => {
                    input.interrupt();
                }
                Key::EndOfInput => {
                    input.close();
                }
            }
        }
        if close {
            input.close();
        }
        drop(input);
        self.settle(id, &exec).await;
        if !exec.signal.seal() {
            return Err(ToolError::aborted());
        }
        let (text, job) = self.jobs.read(id, caller)?;
        Ok(json!({ "text": text, "job": with_waiting(job.public_json(), Some(&self.inputs)) }))
    }

    fn present_call(&self, args: &Value) -> Option<Value> {
        let id = args.get("job_id")?.as_str()?;
        self.spec
            .parameters
            .accepts(args)
            .then(|| generic_card(format!("Send input to background job {id}"), "execute", Some(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::{Key, key};

    #[test]
    fn keys_are_typed_on_a_terminal_and_written_to_a_pipe() {
        assert_eq!(key("Enter", true), Some(Key::Bytes(b"\r")));
        assert_eq!(key("Enter", false), Some(Key::Bytes(b"\n")));
        assert_eq!(key("Up", true), Some(Key::Bytes(b"\x1b[A")));
        assert_eq!(key("Home", true), Some(Key::Bytes(b"\x1b[H")));
        assert_eq!(key("End", false), Some(Key::Bytes(b"\x1b[F")));
        assert_eq!(key("Backspace", true), Some(Key::Bytes(b"\x7f")));
        assert_eq!(key("Ctrl-A", true), Some(Key::Control(1)));
        assert_eq!(key("Ctrl-Z", true), Some(Key::Control(26)));
        assert_eq!(key("Ctrl-C", true), Some(Key::Interrupt));
        assert_eq!(key("Ctrl-D", false), Some(Key::EndOfInput));
        assert_eq!(key("ctrl-a", true), None);
        assert_eq!(key("F13", true), None);
    }
}
