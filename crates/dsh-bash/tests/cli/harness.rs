//! Runs the built binary with a private `DSH_HOME` and captures what it prints.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// What one run printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub code: Option<i32>,
}

impl Run {
    /// The JSON lines of stdout.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    /// Asserts a usage failure: exit 2, nothing on stdout, exactly one line on stderr.
    pub fn assert_usage_error(&self) -> &str {
        assert_eq!(self.code, Some(2), "{self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        assert_eq!(self.stderr.lines().count(), 1, "{self:?}");
        assert!(self.stderr.starts_with("dsh-bash: "), "{self:?}");
        self.stderr.trim_end()
    }
}

/// A scratch directory used as `DSH_HOME` (and for files the test writes).
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("tempdir") }
    }

    /// A scratch directory outside `/tmp` and the OS temp dir (see [`scratch_outside_tmp`]),
    /// for confined commands that must see it as the host does.
    pub fn outside_tmp() -> Self {
        Self { dir: scratch_outside_tmp() }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `name` under the scratch directory and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    /// Runs `dsh-bash ARGS` with `stdin`.
    pub fn run(&self, args: &[&str], stdin: &str) -> Run {
        output(self.command(args), stdin.as_bytes())
    }

    /// Runs `dsh-bash ARGS` on a pseudo-terminal (util-linux `script`, which must be
    /// installed) with stdin at end of file, `env` added and no `DSH_NO_PROGRESS`; returns
    /// everything the terminal showed (stdout and stderr interleaved, with the terminal's
    /// `\r\n`).
    pub fn on_terminal(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let mut line = shell_quote(env!("CARGO_BIN_EXE_dsh-bash"));
        for arg in args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        let mut command = Command::new("script");
        command
            .args(["-qfec", &line, "/dev/null"])
            .env("DSH_HOME", self.dir.path().join("home"))
            .env("TERM", "xterm-256color")
            .env_remove("DSH_NO_PROGRESS")
            .env_remove("DSH_MCP_TOKEN")
            .current_dir(self.dir.path());
        command.envs(env.iter().copied());
        let out = output(command, b"");
        assert_eq!(out.code, Some(0), "script (util-linux) must run dsh-bash here: {out:?}");
        out.stdout
    }

    /// `dsh-bash ARGS` with the scratch directory as cwd and `DSH_HOME`, and no
    /// `DSH_MCP_TOKEN` in its environment; run it with [`output`].
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
        command
            .args(args)
            .env("DSH_HOME", self.dir.path().join("home"))
            .env_remove("DSH_MCP_TOKEN")
            .current_dir(self.dir.path());
        command
    }
}

/// `text` single-quoted for bash.
pub fn shell_quote(text: impl std::fmt::Display) -> String {
    format!("'{}'", text.to_string().replace('\'', r"'\''"))
}

/// Runs `command` with `stdin` and captures what it prints.
pub fn output(mut command: Command, stdin: &[u8]) -> Run {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dsh-bash");
    {
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).expect("write stdin");
    }
    let output = child.wait_with_output().expect("wait");
    Run {
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
        code: output.status.code(),
    }
}

/// Whether this host can confine commands. When it cannot, the test skips (saying so),
/// unless `DSH_SANDBOX_REQUIRE_RUNNERS` names runners that must work (or `CI=true`): then it
/// fails (see `dsh_test_support::sandbox`).
pub fn confining_host() -> bool {
    let args = ["--sandbox", "read-only", "call", "bash", r#"{"command":"true","description":"d"}"#];
    let out = Sandbox::outside_tmp().run(&args, "");
    if !out.stdout.contains("no sandbox backend is usable") {
        assert_eq!(out.stdout, "(no output)", "{out:?}");
        return true;
    }
    dsh_test_support::sandbox::skip_sandbox(&out.stdout);
    false
}

/// The modes to try: unconfined always, `workspace-write` where this host can confine.
pub fn modes() -> Vec<Vec<&'static str>> {
    let mut modes = vec![vec![]];
    if confining_host() {
        modes.push(vec!["--sandbox", "workspace-write"]);
    }
    modes
}

/// Runs `dsh-bash ARGS` in a fresh scratch directory with empty stdin.
pub fn run(args: &[&str]) -> Run {
    Sandbox::new().run(args, "")
}

/// A scratch directory outside `/tmp` and the OS temp dir (both writable under
/// workspace-write), wherever the checkout lives: under `/var/tmp`, else under `$HOME`.
pub fn scratch_outside_tmp() -> tempfile::TempDir {
    let tmp = std::fs::canonicalize("/tmp").expect("/tmp");
    let os_tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap_or_else(|_| tmp.clone());
    let candidates =
        [PathBuf::from("/var/tmp"), std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default()];
    let parent = candidates
        .into_iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .find(|p| !p.starts_with(&tmp) && !p.starts_with(&os_tmp) && p != Path::new("/"))
        .expect("a scratch directory outside /tmp (/var/tmp or $HOME)");
    tempfile::Builder::new().prefix("dsh-bash-cli-").tempdir_in(parent).expect("tempdir")
}
