//! One harness, several sessions: a confined command of one session cannot read another
//! session's output — the spill file of a truncated result, the spill file of a background
//! job — neither at the path the other session's result names nor by listing the spill
//! directories; and it still reads its own session's spill files at the paths its results
//! name. Tried through `batch` (sessions of one process), the HTTP MCP server (MCP sessions
//! of one server) and `call --session` (a process per call) with a configured spill
//! directory that every process shares.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use dsh_test_support::http::{Conn, Reply, start_line_authority};
use serde_json::{Value, json};

use super::cell::{Mode, Outcome, World};
use super::host::{q, unique};
use super::matrix::{Skip, over_matrix};

/// Where spill directories are, as a confined command globs them.
const SPILL_DIRS: &str = "/tmp/dsh-subprocess-*";

/// Prints `marker` on 40000 lines: more than a result keeps, so the whole goes to a spill file.
fn spilling(marker: &str) -> String {
    format!("for i in $(seq 1 40000); do echo \"{marker} $i\"; done")
}

/// The spill file a truncated result's (or a job read's) text names.
fn spill_path(text: &str) -> String {
    let start = text.find("full output: ").map(|i| i + "full output: ".len());
    let end = start.and_then(|s| text[s..].find(']').map(|e| s + e));
    match (start, end) {
        (Some(s), Some(e)) => text[s..e].to_owned(),
        _ => panic!("no spill file named in {text:?}"),
    }
}

/// What another session's command tries: read each file named in `paths` (a shell word
/// list), list every directory of `dirs` (a glob) recursively looking for those names, and
/// look for `markers` in any file there. It prints what it got.
fn prying(paths: &str, markers: &[&str], dirs: &str) -> String {
    let patterns: String = markers.iter().map(|m| format!(" -e {}", q(m))).collect();
    format!(
        "for p in {paths}; do head -c 20 \"$p\" 2>/dev/null && echo READ-BY-PATH; done
for p in {paths}; do ls -laR {dirs} 2>/dev/null | grep -F -- \"$(basename \"$p\")\" && echo LISTED; done
grep -rl{patterns} {dirs} 2>/dev/null && echo FOUND-BY-LISTING
echo tried"
    )
}

/// Asserts that a prying command ran and got nothing of the other session.
#[track_caller]
fn got_nothing(how: &str, text: &str, markers: &[&str]) {
    assert!(text.contains("tried"), "{how}: the prying command did not run: {text}");
    for leak in ["READ-BY-PATH", "LISTED", "FOUND-BY-LISTING"] {
        assert!(!text.contains(leak), "{how}: another session's output was reachable ({leak}): {text}");
    }
    for marker in markers {
        assert!(!text.contains(marker), "{how}: another session's output was reachable: {text}");
    }
}

/// What the owning session's command reads back: the last line of each of its spill files.
fn reading_own(paths: &[&str]) -> String {
    paths.iter().map(|p| format!("tail -n 1 {}\n", q(p))).collect()
}

/// The last lines [`reading_own`] must print for `markers`.
fn own_lines(markers: &[&str]) -> String {
    markers.iter().map(|m| format!("{m} 40000\n")).collect()
}

fn bash(session: &str, command: &str) -> Value {
    json!({"tool": "bash", "session": session,
           "args": {"command": command, "description": "d", "timeoutMs": 60000}})
}

fn background(session: &str, command: &str) -> Value {
    json!({"tool": "bash", "session": session,
           "args": {"command": command, "description": "d", "run_in_background": true}})
}

/// `batch` (one process, the requests written at once): session `a` spills in the
/// foreground and from a background job, and finds its own spill files by their content;
/// session `b` pries at those paths and at every spill directory it sees.
fn attack_batch(world: &World) -> Result<(), Skip> {
    let markers = Markers::new();
    let answers = world.batch_requests(&batch_of_two(&markers, SPILL_DIRS, SPILL_DIRS));
    check_batch(&answers, &markers, "batch");
    Ok(())
}

/// The markers of session `a`'s spilled output, its job's, and a file in its private `/tmp`.
struct Markers {
    spilled: String,
    job: String,
    private: String,
}

impl Markers {
    fn new() -> Markers {
        Markers { spilled: unique("spilled-by-a"), job: unique("job-of-a"), private: unique("tmp-of-a") }
    }
}

/// The requests of [`attack_batch`]: `a` finds its spill files in `own_dirs`, `b` pries in
/// `pried_dirs`.
fn batch_of_two(markers: &Markers, own_dirs: &str, pried_dirs: &str) -> Vec<Value> {
    let (marker, job_marker, private) = (&markers.spilled, &markers.job, &markers.private);
    vec![
        bash("a", &format!("echo {} > /tmp/a-private; {}", q(private), spilling(marker))),
        background("a", &format!("{}; touch job-done", spilling(job_marker))),
        bash(
            "a",
            &format!(
                "while [ ! -e job-done ]; do sleep 0.05; done; sleep 1
grep -rl -e {} -e {} {own_dirs} | sort > a-paths; cat a-paths",
                q(marker),
                q(job_marker)
            ),
        ),
        json!({"tool": "job_output", "session": "a", "args": {"job_id": "bash-1"}}),
        bash("b", &prying("$(cat a-paths)", &[marker, job_marker, private], pried_dirs)),
    ]
}

/// Asserts what [`batch_of_two`] must answer: `a` found exactly the spill files its results
/// name, `b` got nothing.
fn check_batch(answers: &[Value], markers: &Markers, how: &str) {
    let text = |i: usize| Outcome::from_value(&answers[i]).text;
    let mut expected = [spill_path(&text(0)), spill_path(&text(3))];
    expected.sort();
    let found = Outcome::from_value(&answers[2]);
    assert_eq!(
        found.ok(),
        format!("{}\n", expected.join("\n")),
        "{how}: session a found its own spill files"
    );
    got_nothing(how, &text(4), &[&markers.spilled, &markers.job, &markers.private]);
}

/// [`attack_batch`] with the harness's temporary directory outside `/tmp`: the spill
/// directories and the sessions' private directories are then where a confined command's
/// world shows the host's files; `b` pries at `a`'s there.
fn attack_batch_temp_elsewhere(world: &World) -> Result<(), Skip> {
    let temp = world.outside.join("temp");
    std::fs::create_dir(&temp).expect("mkdir temp");
    world.give(&temp);
    let markers = Markers::new();
    let t = q(temp.display());
    let own = format!("{t}/dsh-subprocess-*");
    let pried = format!("{t}/dsh-subprocess-* {t}/dsh-sandbox-*");
    let answers =
        world.batch_requests_with_env(&batch_of_two(&markers, &own, &pried), &[("TMPDIR", temp.as_path())]);
    check_batch(&answers, &markers, "batch, TMPDIR outside /tmp");
    Ok(())
}

#[test]
fn a_session_cannot_read_another_sessions_files_when_the_temporary_directory_is_elsewhere() {
    over_matrix(
        "a_session_cannot_read_another_sessions_files_when_the_temporary_directory_is_elsewhere",
        attack_batch_temp_elsewhere,
    );
}

#[test]
fn a_session_cannot_read_another_sessions_spill_files_in_one_batch() {
    over_matrix("a_session_cannot_read_another_sessions_spill_files_in_one_batch", attack_batch);
}

/// `dsh-bash mcp --http` run as the cell's user in its own process group (so `runuser` and
/// the server end together); ended with `SIGTERM` when dropped.
pub(super) struct HttpServer {
    child: std::process::Child,
    pub(super) authority: String,
}

impl HttpServer {
    /// Starts the server with `token_file` and the harness options `options` (before `mcp`).
    pub(super) fn start(world: &World, token_file: &std::path::Path, options: &[&str]) -> HttpServer {
        let mut args: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        args.extend::<Vec<String>>(vec![
            "--sandbox".into(),
            Mode::WorkspaceWrite.name().into(),
            "mcp".into(),
            "--http".into(),
            "127.0.0.1:0".into(),
            "--token-file".into(),
            token_file.display().to_string(),
        ]);
        let mut command = world.dsh(&args);
        command.stdout(Stdio::null()).process_group(0);
        let mut child = command.spawn().expect("spawn dsh-bash mcp --http");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("the start line");
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let authority = start_line_authority(&line).unwrap_or_else(|| panic!("no start line: {line:?}"));
        HttpServer { child, authority }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let group = i32::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill has no memory preconditions; the group is the server's own.
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The text of a `tools/call` reply.
pub(super) fn reply_text(reply: &Reply, id: u64) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let response = reply.response(id).unwrap_or_else(|| panic!("no response {id} in {}", reply.body));
    response["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {response}"))
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

/// Two MCP sessions of one HTTP server: `a` spills in the foreground and from a job; `b`
/// pries at the paths `a`'s results name and at every spill directory; `a` reads its own.
fn attack_http(world: &World) -> Result<(), Skip> {
    let token = unique("token");
    let token_file = world.outside.join("mcp-token");
    std::fs::write(&token_file, format!("{token}\n")).expect("write the token file");
    world.give(&token_file);
    let server = HttpServer::start(world, &token_file, &[]);
    let patience = Duration::from_secs(120);
    let mut a = Conn::open(&server.authority, &token, patience).expect("connect a");
    let mut b = Conn::open(&server.authority, &token, patience).expect("connect b");
    let session_a = a.open_session("a").expect("session a");
    let session_b = b.open_session("b").expect("session b");
    assert_ne!(session_a, session_b);
    let (marker, job_marker) = (unique("spilled-by-a"), unique("job-of-a"));
    let call = |conn: &mut Conn, session: &str, id: u64, tool: &str, args: Value| {
        reply_text(&conn.call(session, id, tool, args).expect("tools/call"), id)
    };
    let command = |command: &str| json!({"command": command, "description": "d"});
    let own = spill_path(&call(&mut a, &session_a, 1, "bash", command(&spilling(&marker))));
    let job_command = format!("{}; touch job-done", spilling(&job_marker));
    let started = call(
        &mut a,
        &session_a,
        2,
        "bash",
        json!({"command": job_command, "description": "d", "run_in_background": true}),
    );
    let job_id = started.trim().rsplit(' ').next().expect("a job id").to_owned();
    call(&mut a, &session_a, 3, "bash", command("while [ ! -e job-done ]; do sleep 0.05; done; sleep 1"));
    let job = spill_path(&call(&mut a, &session_a, 4, "job_output", json!({"job_id": job_id})));
    let paths = format!("{} {}", q(&own), q(&job));
    let pried =
        call(&mut b, &session_b, 5, "bash", command(&prying(&paths, &[&marker, &job_marker], SPILL_DIRS)));
    got_nothing("mcp --http", &pried, &[&marker, &job_marker]);
    let back = call(&mut a, &session_a, 6, "bash", command(&reading_own(&[&own, &job])));
    assert_eq!(back, own_lines(&[&marker, &job_marker]), "session a reads its own spill files");
    drop(server);
    Ok(())
}

#[test]
fn an_mcp_session_cannot_read_another_sessions_spill_files() {
    over_matrix("an_mcp_session_cannot_read_another_sessions_spill_files", attack_http);
}

/// `call --session` (a process per call) with a spill directory configured below `/tmp`,
/// which every process writes to: session `b`'s call pries at the file `a`'s call spilled;
/// a later call of `a` (another process) still reads it.
fn attack_configured_dir(world: &World) -> Result<(), Skip> {
    let base =
        tempfile::Builder::new().prefix("dsh-world-spill-").tempdir_in("/tmp").expect("tempdir in /tmp");
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let spill = base.path().join("spill");
    std::fs::create_dir(&spill).expect("mkdir spill");
    std::fs::set_permissions(&spill, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    world.give(&spill);
    world.configure(&format!("[subprocess]\nspillDir = {}", json!(spill)));
    let marker = unique("spilled-by-a");
    let first = world.call(Mode::WorkspaceWrite, Some("a"), &spilling(&marker));
    let own = spill_path(&first.text);
    let dirs = format!("{}/", q(spill.display()));
    let pried = world.call(Mode::WorkspaceWrite, Some("b"), &prying(&q(&own), &[&marker], &dirs));
    got_nothing("call --session, a configured spill directory", &pried.text, &[&marker]);
    let back = world.call(Mode::WorkspaceWrite, Some("a"), &reading_own(&[&own]));
    assert_eq!(back.ok(), own_lines(&[&marker]), "a later call of session a reads its spill file");
    Ok(())
}

#[test]
fn a_call_session_cannot_read_another_sessions_spill_files_in_a_configured_directory() {
    over_matrix(
        "a_call_session_cannot_read_another_sessions_spill_files_in_a_configured_directory",
        attack_configured_dir,
    );
}
