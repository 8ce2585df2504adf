//! The confinement holds when the host changes the files under it: a denied read outside the
//! workspace (`~/.git-credentials`), one inside it (`denyRead`), and a protected path
//! (`.envrc`) that the host rewrites the way `git config`, credential helpers and editors do
//! (a new file renamed over the old one) stay closed, between two calls of one session and
//! while a confined command runs; a denied file that did not exist when the session started
//! stays closed once the host creates it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::Duration;

use serde_json::json;

use super::cell::{Mode, Outcome, World};
use super::host::{q, wait_until};
use super::matrix::{Skip, over_matrix};

/// One `dsh-bash batch` under workspace-write, fed one line at a time, so the host can change
/// files between two calls (and during one) of the same session.
struct Batch {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Batch {
    fn start(world: &World, home: &Path) -> Batch {
        let args: Vec<String> = vec!["--sandbox".into(), Mode::WorkspaceWrite.name().into(), "batch".into()];
        let mut child = world
            .dsh_with_home(&args, Some(home))
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn dsh-bash batch");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Batch { child, stdin, stdout, next: 0 }
    }

    /// Sends `command` as the next line of session `s`.
    fn send(&mut self, world: &World, command: &str) {
        let line = json!({
            "tool": "bash",
            "args": {"command": command, "description": "d", "timeoutMs": 60000},
            "session": "s",
            "cwd": world.ws,
            "id": self.next,
        });
        self.next += 1;
        writeln!(self.stdin, "{line}").expect("write a batch line");
        self.stdin.flush().expect("flush the batch line");
    }

    /// Starts `command` as a background job of session `s` and reads the answer (the job's
    /// start).
    fn start_job(&mut self, world: &World, command: &str) -> Outcome {
        let line = json!({
            "tool": "bash",
            "args": {"command": command, "description": "d", "run_in_background": true},
            "session": "s",
            "cwd": world.ws,
            "id": self.next,
        });
        self.next += 1;
        writeln!(self.stdin, "{line}").expect("write a batch line");
        self.stdin.flush().expect("flush the batch line");
        self.answer()
    }

    /// Reads the answer of the line sent last.
    fn answer(&mut self) -> Outcome {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read a batch answer");
        assert!(!line.is_empty(), "dsh-bash batch ended without an answer");
        Outcome::from_value(&serde_json::from_str(&line).expect("a JSON answer line"))
    }

    fn call(&mut self, world: &World, command: &str) -> Outcome {
        self.send(world, command);
        self.answer()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replaces `path` the way `git config` does: a new file beside it, renamed over it, owned by
/// the cell's user (so only the sandbox stands between the command and it).
fn replace_by_rename(world: &World, path: &Path, text: &str) {
    let temp = path.with_extension("dsh-new");
    std::fs::write(&temp, text).expect("write the replacement");
    world.give(&temp);
    std::fs::rename(&temp, path).expect("rename the replacement over the file");
}

/// The commands that try each protection, with the marks the assertions look for.
fn attempts(world: &World, home: &Path) -> String {
    let credentials = q(home.join(".git-credentials").display());
    let netrc = q(home.join(".netrc").display());
    let aws = q(home.join(".aws/credentials").display());
    let token = q(world.dsh_home().join("mcp/t.token").display());
    format!(
        "cat {credentials}; echo planted >> .envrc && echo WROTE-CONFIG; \
         python3 -c 'open(\".envrc\", \"a\").write(\"planted\\n\")' 2>/dev/null && echo WROTE-CONFIG; \
         cat {netrc}; cat keys/token; cat {aws} {token} later.env 2>&1; true"
    )
}

#[track_caller]
fn assert_held(world: &World, out: &Outcome, secrets: &[&str], when: &str) {
    for secret in secrets {
        assert!(!out.text.contains(secret), "{when}: a denied file was read: {out:#?}");
    }
    assert!(!out.text.contains("WROTE-CONFIG"), "{when}: .envrc was written: {out:#?}");
    let envrc = std::fs::read_to_string(world.ws.join(".envrc")).expect("read .envrc");
    assert!(!envrc.contains("planted"), "{when}: .envrc holds the command's line: {envrc:?}");
    assert!(out.text.contains("Permission denied"), "{when}: not refused with EACCES: {out:#?}");
}

fn attack_host_renames(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    let home: PathBuf = world.ws.parent().expect("parent").join("user-home");
    std::fs::create_dir_all(&home).expect("mkdir home");
    std::fs::write(home.join(".git-credentials"), "https://u:FIRST-SECRET-1a2b@host\n").expect("write");
    std::fs::write(home.join("notes.txt"), "notes\n").expect("write");
    std::fs::create_dir_all(home.join(".aws")).expect("mkdir .aws");
    std::fs::write(home.join(".aws/credentials"), "AWS-SECRET-1\n").expect("write");
    world.write(".envrc", "export A=1\n");
    world.write("keys/token", "WS-SECRET-1\n");
    world.give(&home);
    // A denied file inside the workspace (`denyRead` in the world's composition file).
    let config = world.ws.parent().expect("parent").join("world.toml");
    let mut file = std::fs::OpenOptions::new().append(true).open(&config).expect("open world.toml");
    let denied = [world.ws.join("keys/token"), world.ws.join("later.env")].map(|p| p.display().to_string());
    writeln!(file, "denyRead = {denied:?}").expect("append");
    let mut batch = Batch::start(world, &home);

    // The setup is real: the same session reads an ordinary file of the home and writes the
    // workspace.
    let control =
        batch.call(world, &format!("cat {} && echo ok > file", q(home.join("notes.txt").display())));
    assert_eq!(control.ok(), "notes\n", "{control:#?}");
    let first = batch.call(world, &attempts(world, &home));
    assert_held(
        world,
        &first,
        &["FIRST-SECRET", "WS-SECRET", "AWS-SECRET"],
        "before the host changed anything",
    );

    // Between two calls of the session: both files replaced by rename; then a denied one
    // created where there was none.
    replace_by_rename(world, &home.join(".git-credentials"), "https://u:SECOND-SECRET-3c4d@host\n");
    replace_by_rename(world, &world.ws.join(".envrc"), "export A=2\n");
    replace_by_rename(world, &world.ws.join("keys/token"), "WS-SECRET-2\n");
    let second = batch.call(world, &attempts(world, &home));
    assert_held(world, &second, &["SECOND-SECRET", "WS-SECRET"], "between two calls");
    std::fs::write(home.join(".netrc"), "machine host password NETRC-SECRET-5e6f\n").expect("write .netrc");
    world.give(&home);
    let created = batch.call(world, &attempts(world, &home));
    assert_held(
        world,
        &created,
        &["SECOND-SECRET", "NETRC-SECRET", "WS-SECRET"],
        "a denied file created between calls",
    );

    // While a confined command runs: it starts, the host replaces both files again, then the
    // command tries.
    let started = world.ws.join("started");
    let go = world.ws.join("go");
    let marker = super::host::unique("running");
    batch.send(
        world,
        &format!(
            "touch started; : {marker}; while [ ! -e go ]; do sleep 0.05; done; {}",
            attempts(world, &home)
        ),
    );
    assert!(wait_until(Duration::from_secs(30), || started.exists()), "the command did not start");
    let running = super::host::pids_with(&marker);
    assert!(!running.is_empty(), "the running command is not found by its marker");
    // One file at a time: the covers are made again by the harness once the kernel reports
    // the change (a short moment, the README says: a command that opens the file within it
    // keeps what it opened, for the auto-run check after the call to see), each before the
    // next change could repair it; the command tries once they are back, as one would a
    // moment later. Landlock's denials outside the workspace have no such moment.
    let covered = |path: &Path| {
        let path = path.display().to_string();
        running.iter().any(|pid| {
            let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
            table.lines().any(|line| line.split(' ').nth(4) == Some(path.as_str()))
        })
    };
    for (path, text) in [
        (home.join(".git-credentials"), "https://u:THIRD-SECRET-7a8b@host\n"),
        (world.ws.join(".envrc"), "export A=3\n"),
        (world.ws.join("keys/token"), "WS-SECRET-3\n"),
        (home.join(".netrc"), "machine host password NETRC2-SECRET-9c0d\n"),
    ] {
        replace_by_rename(world, &path, text);
        assert!(
            wait_until(Duration::from_secs(20), || covered(&path)),
            "{} replaced by the host was not covered again in the running command's world",
            path.display()
        );
    }
    // A denied directory replaced by another (the old one's cover leaves with it), and denied
    // paths that did not exist when the command started: none changes the mount table.
    std::fs::rename(home.join(".aws"), home.join(".aws-old")).expect("move .aws");
    std::fs::create_dir(home.join(".aws")).expect("mkdir .aws");
    std::fs::write(home.join(".aws/credentials"), "AWS-SECRET-2\n").expect("write");
    let tokens = world.dsh_home().join("mcp");
    std::fs::create_dir_all(&tokens).expect("mkdir DSH_HOME/mcp");
    std::fs::write(tokens.join("t.token"), "TOKEN-SECRET-5\n").expect("write a token");
    std::fs::write(world.ws.join("later.env"), "LATER-SECRET-6\n").expect("write later.env");
    for path in [home.join(".aws"), tokens.clone(), world.ws.join("later.env")] {
        assert!(
            wait_until(Duration::from_secs(20), || covered(&path)),
            "{} made by the host was not covered in the running command's world",
            path.display()
        );
    }
    std::fs::write(&go, "").expect("write go");
    world.give(&go);
    let during = batch.answer();
    assert_held(
        world,
        &during,
        &["THIRD-SECRET", "NETRC2-SECRET", "WS-SECRET", "AWS-SECRET", "TOKEN-SECRET", "LATER-SECRET"],
        "while a command runs",
    );
    Ok(())
}

/// Whether a running process whose argv holds `marker` sees a mount at `path` (a cover).
fn covered_for(marker: &str, path: &Path) -> bool {
    let path = path.display().to_string();
    super::host::pids_with(marker).iter().any(|pid| {
        let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
        table.lines().any(|line| line.split(' ').nth(4) == Some(path.as_str()))
    })
}

/// A background job of a session whose world holds a single denied file, `target`, which the
/// host replaces by rename again and again while the job runs; the job then reads it, and so
/// does the session's next call. With no other cover of a file to bind from, each cover is
/// made again from the one spare copy of the empty file, which a pass of the repair that ran
/// in the middle of a rename used to spend for nothing.
fn lone_cover_holds(world: &World, home: &Path, target: &Path, secret: &str) {
    let mut batch = Batch::start(world, home);
    let shown = q(target.display());
    let marker = super::host::unique("job");
    let started = world.ws.join("started");
    let go = world.ws.join("go");
    let finished = world.ws.join("finished");
    let job = batch.start_job(
        world,
        &format!(
            "touch started; : {marker}; while [ ! -e go ]; do sleep 0.05; done; \
             cat {shown} > seen 2>&1; touch finished"
        ),
    );
    assert!(wait_until(Duration::from_secs(30), || started.exists()), "the job did not start: {job:#?}");
    assert!(covered_for(&marker, target), "{} is not covered in the job's world", target.display());
    for round in 1..=5 {
        replace_by_rename(world, target, &format!("{secret}-{round}\n"));
        assert!(
            wait_until(Duration::from_secs(20), || covered_for(&marker, target)),
            "{} replaced by the host (time {round}) was not covered again in the running job's world",
            target.display()
        );
    }
    std::fs::write(&go, "").expect("write go");
    world.give(&go);
    assert!(wait_until(Duration::from_secs(30), || finished.exists()), "the job did not finish");
    let seen = std::fs::read_to_string(world.ws.join("seen")).expect("read what the job saw");
    assert!(!seen.contains(secret), "the running job read the replaced file: {seen:?}");
    assert!(seen.contains("Permission denied"), "the job was not refused with EACCES: {seen:?}");
    let next = batch.call(world, &format!("cat {shown}; true"));
    assert!(!next.text.contains(secret), "the next call read the replaced file: {next:#?}");
    assert!(next.text.contains("Permission denied"), "the next call was not refused: {next:#?}");
    for file in [started, go, finished, world.ws.join("seen")] {
        std::fs::remove_file(file).expect("remove a mark file");
    }
}

fn attack_lone_covers(world: &World) -> Result<(), Skip> {
    // `~/.git-credentials`, the one file denied in its world (under the in-process runner
    // Landlock refuses it too; its cover is checked all the same).
    let home = world.ws.parent().expect("parent").join("user-home");
    std::fs::create_dir_all(&home).expect("mkdir home");
    std::fs::write(home.join(".git-credentials"), "https://u:CRED-SECRET-0@host\n").expect("write");
    world.give(&home);
    lone_cover_holds(world, &home, &home.join(".git-credentials"), "CRED-SECRET");
    // A file denied inside the workspace, which only its cover keeps: a home with nothing
    // denied in it.
    let bare = world.ws.parent().expect("parent").join("bare-home");
    std::fs::create_dir_all(&bare).expect("mkdir home");
    world.give(&bare);
    world.write(".env", "ENV-SECRET-0\n");
    let config = world.ws.parent().expect("parent").join("world.toml");
    let mut file = std::fs::OpenOptions::new().append(true).open(&config).expect("open world.toml");
    writeln!(file, "denyRead = [{:?}]", world.ws.join(".env").display().to_string()).expect("append");
    lone_cover_holds(world, &bare, &world.ws.join(".env"), "ENV-SECRET");
    Ok(())
}

#[test]
fn world_a_lone_denied_file_stays_covered_when_the_host_replaces_it_during_a_job() {
    over_matrix(
        "world_a_lone_denied_file_stays_covered_when_the_host_replaces_it_during_a_job",
        attack_lone_covers,
    );
}

#[test]
fn world_denials_hold_when_the_host_replaces_the_files() {
    over_matrix("world_denials_hold_when_the_host_replaces_the_files", attack_host_renames);
}

/// The command itself moves the directory that holds a denied or protected path inside the
/// workspace (a cover moves with its directory), then reads or rebuilds it.
fn attack_moved_parents(world: &World) -> Result<(), Skip> {
    world.write("keys/token", "MOVED-SECRET-1\n");
    world.write(".claude/settings.json", "{}\n");
    world.write(".git/hooks/README", "hooks\n");
    let config = world.ws.parent().expect("parent").join("world.toml");
    let mut file = std::fs::OpenOptions::new().append(true).open(&config).expect("open world.toml");
    writeln!(file, "denyRead = [{:?}]", world.ws.join("keys/token").display().to_string()).expect("append");
    let home = world.ws.parent().expect("parent").join("user-home");
    std::fs::create_dir_all(&home).expect("mkdir home");
    world.give(&home);
    let mut batch = Batch::start(world, &home);
    let first = batch.call(
        world,
        "mv keys keys2; mv .claude .claude2; mv .git .gitx; mkdir -p .claude && echo '{\"hooks\":1}' > .claude/settings.json; \
         cat keys2/token keys/token; true",
    );
    let second = batch.call(world, "cat keys2/token keys/token; cat .claude/settings.json; true");
    for (when, out) in [("the moving call", &first), ("the next call", &second)] {
        assert!(!out.text.contains("MOVED-SECRET"), "{when}: the denied file was read: {out:#?}");
    }
    assert!(world.ws.join("keys/token").is_file(), "the denied file's directory was moved: {first:#?}");
    let settings = std::fs::read_to_string(world.ws.join(".claude/settings.json")).expect("read settings");
    assert_eq!(settings, "{}\n", "the protected file was replaced: {first:#?}");
    assert!(!world.ws.join(".claude2").exists(), "the protected file's directory was moved: {first:#?}");
    assert!(
        !world.ws.join(".gitx").exists() && world.ws.join(".git/hooks/README").is_file(),
        "the git directory holding the protected hooks was moved: {first:#?}"
    );
    Ok(())
}

#[test]
fn world_denials_hold_when_the_command_moves_their_directories() {
    over_matrix("world_denials_hold_when_the_command_moves_their_directories", attack_moved_parents);
}
