//! One cell of the matrix (a runner and the user `dsh-bash` runs as) and the world a test
//! builds for it: a workspace outside `/tmp`, a `DSH_HOME`, a directory outside the
//! workspace that the user could write unconfined, and the way to run the binary there.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use super::host;
use super::matrix::Skip;

/// The sandbox runner a cell forces (a one-runner chain is selected without probing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runner {
    Landlock,
    Bwrap,
}

impl Runner {
    pub fn name(self) -> &'static str {
        match self {
            Runner::Landlock => "landlock",
            Runner::Bwrap => "bwrap",
        }
    }
}

/// Who runs `dsh-bash`: the test's own root, or `nobody` through `runuser`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum User {
    Root,
    Nobody,
}

impl User {
    pub fn name(self) -> &'static str {
        match self {
            User::Root => "root",
            User::Nobody => "nobody",
        }
    }

    /// `(uid, gid)` of this user.
    pub fn ids(self) -> (u32, u32) {
        match self {
            User::Root => (0, 0),
            User::Nobody => {
                host::nobody_ids().expect("the nobody user exists (checked before the cell runs)")
            }
        }
    }
}

/// A runner and a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cell {
    pub runner: Runner,
    pub user: User,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.runner.name(), self.user.name())
    }
}

/// The sandbox mode a call runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    ReadOnly,
    WorkspaceWrite,
    /// Unconfined: the control that shows an attack's setup really reaches the host.
    DangerFullAccess,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }
}

/// What a `call --json bash` answered, flattened.
#[derive(Debug)]
pub struct Outcome {
    /// The model-facing text (stdout, then stderr after `[stderr]`, then the markers).
    pub text: String,
    pub is_error: bool,
    pub exit_code: Option<i64>,
    pub stdout: String,
}

impl Outcome {
    /// Parses the one JSON line of `call --json`; anything else is a broken run.
    pub fn parse(output: &Output) -> Outcome {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let value: Value = serde_json::from_str(stdout.trim_end()).unwrap_or_else(|e| {
            panic!(
                "dsh-bash did not answer one JSON line ({e}; exit {:?}): stdout {stdout:?} stderr {stderr:?}",
                output.status
            )
        });
        Outcome::from_value(&value)
    }

    /// Reads one `call --json` object (or `batch` response line).
    pub fn from_value(value: &Value) -> Outcome {
        let text = value["content"][0]["text"].as_str().unwrap_or_default().to_owned();
        let structured = &value["structured"];
        Outcome {
            text,
            is_error: value["isError"] == json!(true),
            exit_code: structured["exitCode"].as_i64(),
            stdout: structured["stdout"]["text"].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// Asserts a clean run (not an error, exit 0) and returns its stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert!(!self.is_error && self.exit_code == Some(0), "the command did not succeed: {self:#?}");
        &self.stdout
    }

    /// The runner could not start: the provider's `SANDBOX_UNAVAILABLE` message.
    pub fn runner_unavailable(&self) -> bool {
        self.is_error && self.text.contains("no sandbox backend is usable")
    }
}

/// A fresh world for one cell: every directory owned by the cell's user.
pub struct World {
    pub cell: Cell,
    scratch: tempfile::TempDir,
    /// The workspace root (and cwd) of every call.
    pub ws: PathBuf,
    /// A directory outside the workspace that the cell's user may write unconfined.
    pub outside: PathBuf,
    home: PathBuf,
    config: PathBuf,
    /// A value only `dsh-bash`'s own environment holds (`DSH_*` is scrubbed from commands).
    pub harness_marker: String,
}

/// Set in `dsh-bash`'s environment to [`World::harness_marker`].
pub const HARNESS_MARKER_VAR: &str = "DSH_WORLD_HARNESS_MARKER";

impl World {
    pub fn new(cell: Cell) -> World {
        let scratch = crate::harness::scratch_outside_tmp();
        let base = scratch.path().to_path_buf();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).expect("chmod scratch");
        let ws = base.join("ws");
        let outside = base.join("outside");
        let home = base.join("home");
        for dir in [&ws, &outside, &home] {
            std::fs::create_dir(dir).expect("mkdir");
        }
        let config = base.join("world.toml");
        std::fs::write(&config, format!("[sandbox-local]\nrunners = [\"{}\"]\n", cell.runner.name()))
            .expect("write config");
        let world =
            World { cell, scratch, ws, outside, home, config, harness_marker: host::unique("harness") };
        world.give(world.scratch.path());
        world
    }

    /// The world's `DSH_HOME` (sessions, logs).
    pub fn dsh_home(&self) -> &Path {
        &self.home
    }

    /// Hands `path` (recursively) to the cell's user.
    pub fn give(&self, path: &Path) {
        let (uid, gid) = self.cell.user.ids();
        host::chown_tree(path, uid, gid);
    }

    /// Writes `rel` under the workspace (creating parents), owned by the cell's user.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.ws.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir -p");
        std::fs::write(&path, text).expect("write");
        self.give(&self.ws);
        path
    }

    /// The `PATH` commands see: the system directories, plus the running toolchain's for root
    /// (the `nobody` user cannot reach a toolchain under `/root`).
    pub fn path_env(&self) -> String {
        let system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        match (self.cell.user, host::toolchain_bin()) {
            (User::Root, Some(dir)) => format!("{}:{system}", dir.display()),
            _ => system.to_owned(),
        }
    }

    /// `dsh-bash --config <runner> --workspace-root <ws> ARGS`, run as the cell's user, in
    /// the workspace, with a private `DSH_HOME`; stdin is `/dev/null`, stdout and stderr piped.
    pub fn dsh(&self, args: &[String]) -> Command {
        self.dsh_with_home(args, None)
    }

    /// [`World::dsh`] with `dsh-bash`'s own `HOME` set to `home` when given (`runuser` resets
    /// `HOME`, so for `nobody` it is set through `env`).
    pub fn dsh_with_home(&self, args: &[String], home: Option<&Path>) -> Command {
        self.dsh_binary(&host::binary_for(self.cell.user), args, home)
    }

    /// [`World::dsh_with_home`] running `binary` (a copy of `dsh-bash` installed elsewhere).
    pub fn dsh_binary(&self, binary: &Path, args: &[String], home: Option<&Path>) -> Command {
        let mut command = match self.cell.user {
            User::Root => {
                let mut c = Command::new(binary);
                if let Some(home) = home {
                    c.env("HOME", home);
                }
                c
            }
            User::Nobody => {
                let mut c = Command::new(host::runuser().expect("runuser (checked before the cell runs)"));
                c.args(["-u", "nobody", "--"]);
                if let Some(home) = home {
                    c.arg("env").arg(format!("HOME={}", home.display()));
                }
                c.arg(binary);
                c
            }
        };
        command
            .arg("--config")
            .arg(&self.config)
            .arg("--workspace-root")
            .arg(&self.ws)
            .args(args)
            .env("DSH_HOME", &self.home)
            .env("PATH", self.path_env())
            .env(HARNESS_MARKER_VAR, &self.harness_marker)
            .env_remove("DSH_MCP_TOKEN")
            .current_dir(&self.ws)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// The arguments of `call --json [--session S --cwd ws] bash {command}` under `mode`.
    pub fn call_args(&self, mode: Mode, session: Option<&str>, command: &str) -> Vec<String> {
        let mut args: Vec<String> =
            vec!["--sandbox".into(), mode.name().into(), "call".into(), "--json".into()];
        if let Some(session) = session {
            args.extend(["--session".into(), session.into(), "--cwd".into(), self.ws.display().to_string()]);
        }
        let request = json!({"command": command, "description": "d", "timeoutMs": 60000});
        args.extend(["bash".into(), request.to_string()]);
        args
    }

    /// Runs `command` confined under `mode` (in `session` when given) and waits for it.
    pub fn call(&self, mode: Mode, session: Option<&str>, command: &str) -> Outcome {
        let output = self.dsh(&self.call_args(mode, session, command)).output().expect("spawn dsh-bash");
        Outcome::parse(&output)
    }

    /// Runs `commands` as `(session, command)` lines of one `batch` under workspace-write (one
    /// `dsh-bash` process), each session with the workspace as its cwd.
    pub fn batch(&self, commands: &[(&str, &str)]) -> Vec<Outcome> {
        let requests: Vec<Value> = commands
            .iter()
            .map(|(session, command)| {
                json!({
                    "tool": "bash",
                    "args": {"command": command, "description": "d", "timeoutMs": 60000},
                    "session": session,
                })
            })
            .collect();
        self.batch_requests(&requests).iter().map(Outcome::from_value).collect()
    }

    /// Runs `requests` (`{"tool", "args", "session"}`) as the lines of one `batch` under
    /// workspace-write, each with the workspace as its cwd and its index as its id; returns
    /// the response lines.
    pub fn batch_requests(&self, requests: &[Value]) -> Vec<Value> {
        self.batch_requests_with_env(requests, &[])
    }

    /// [`World::batch_requests`] with `env` added to `dsh-bash`'s own environment.
    pub fn batch_requests_with_env(&self, requests: &[Value], env: &[(&str, &Path)]) -> Vec<Value> {
        let mut input = String::new();
        for (id, request) in requests.iter().enumerate() {
            let mut line = request.clone();
            line["cwd"] = json!(self.ws);
            line["id"] = json!(id);
            input.push_str(&format!("{line}\n"));
        }
        let args: Vec<String> = vec!["--sandbox".into(), Mode::WorkspaceWrite.name().into(), "batch".into()];
        let mut command = self.dsh(&args);
        command.envs(env.iter().copied());
        let mut child = command.stdin(Stdio::piped()).spawn().expect("spawn dsh-bash batch");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write batch");
        let output = child.wait_with_output().expect("wait for dsh-bash batch");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let answers: Vec<Value> =
            stdout.lines().map(|line| serde_json::from_str(line).expect("a JSON response line")).collect();
        assert_eq!(answers.len(), requests.len(), "batch answered {stdout:?} ({:?})", output.status);
        answers
    }

    /// Adds `toml` (tables) to the configuration every run of this world reads.
    pub fn configure(&self, toml: &str) {
        let mut file = std::fs::OpenOptions::new().append(true).open(&self.config).expect("open config");
        file.write_all(format!("\n{toml}\n").as_bytes()).expect("append to config");
    }

    /// Runs `command` confined under workspace-write.
    pub fn bash(&self, command: &str) -> Outcome {
        self.call(Mode::WorkspaceWrite, None, command)
    }

    /// A host command run unconfined as the cell's user in the workspace.
    pub fn host_command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        // SHELL is named, not inherited: tmux runs its sessions with it, and falls back to
        // the login shell, which is nologin for `nobody`.
        command.current_dir(&self.ws).env("PATH", self.path_env()).env("SHELL", "/bin/sh");
        if self.cell.user == User::Nobody {
            let (uid, gid) = self.cell.user.ids();
            command.uid(uid).gid(gid).env("HOME", &self.outside);
        }
        command
    }

    /// Runs `script` with bash, unconfined, as the cell's user in the workspace; asserts it
    /// succeeds and returns its stdout (test setup and host-side checks).
    #[track_caller]
    pub fn host_sh(&self, script: &str) -> String {
        let output = self.host_command("bash").args(["-c", script]).output().expect("spawn bash");
        assert!(
            output.status.success(),
            "host script failed ({}): {script}\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `Ok` when `tool` is on the cell's `PATH` and its user can run it. Else a skip when only
    /// `nobody` cannot reach it (a host layout, such as a toolchain under `/root`); when it is
    /// missing from that `PATH` a skip too, but a failure under `CI=true` (`.ci/run` installs it).
    pub fn require(&self, tool: &str) -> Result<(), Skip> {
        let path = self.path_env();
        if host::find_tool(tool, &path, self.cell.user).is_some() {
            return Ok(());
        }
        if self.cell.user == User::Nobody && host::find_tool(tool, &path, User::Root).is_some() {
            return Err(Skip(format!("{tool} is installed but the nobody user cannot reach it")));
        }
        let elsewhere = host::find_tool(tool, &std::env::var("PATH").unwrap_or_default(), User::Root)
            .map(|found| format!(" (only at {})", found.display()))
            .unwrap_or_default();
        let missing = format!("{tool} is not on the PATH commands get ({path}){elsewhere}");
        assert!(!host::ci(), "{missing}, and CI=true requires it (.ci/run installs it)");
        Err(Skip(missing))
    }
}
