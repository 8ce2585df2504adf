//! Shared by the `harness_writes_*` tests: runs of the built binary with a private
//! `DSH_HOME` in a scratch directory outside the temp areas (which `workspace-write` leaves
//! writable), and a `batch` driven one line at a time.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

/// `dsh-bash ARGS` with `dir` as its cwd and `dir/home` as `DSH_HOME`.
pub fn dsh_bash(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
    command.args(args).env("DSH_HOME", dir.join("home")).env_remove("DSH_MCP_TOKEN").current_dir(dir);
    command
}

/// A running `dsh-bash batch` answering one request at a time.
pub struct Batch {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Batch {
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn dsh-bash batch");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, stdin, stdout }
    }

    /// Sends one request line and returns its response line.
    pub fn call(&mut self, request: &Value) -> Value {
        let stdin = self.stdin.as_mut().expect("batch still open");
        writeln!(stdin, "{request}").expect("write request");
        stdin.flush().expect("flush request");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read response");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }

    /// Closes stdin and waits for the batch to end.
    pub fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        self.child.wait().expect("wait").code()
    }
}

/// The text of a response's content blocks.
pub fn text(response: &Value) -> String {
    response["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|block| block["text"].as_str().expect("text block"))
        .collect()
}
