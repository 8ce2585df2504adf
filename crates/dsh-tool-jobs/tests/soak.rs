//! Soak tests over the real stack: many sessions, many background bash jobs, random reads,
//! waits, kills and cross-session attempts through the tools, then disposal of the whole
//! composition. Bounded in time, asserting no timing.
//!
//! Every command carries a marker unique to the test run; after disposal no live process may
//! carry it (`exec -a` puts it into a sleeping process's own command line).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{AGENTS, Agent, Context, TOOLS, ToolExec, ToolRegistry, ToolResult};
use dsh_jobs::JobsPlugin;
use dsh_shell::{SHELL, ShellEnvConfig, ShellEnvPlugin, ShellExecutor};
use dsh_subprocess::SubprocessService;
use dsh_tool_bash::ToolBash;
use dsh_tool_jobs::ToolJobsPlugin;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// A small deterministic generator (xorshift64*), seeded per run and printed for replay.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
}

/// A marker no other process on the machine carries.
fn unique_marker(name: &str) -> String {
    format!("dsh-{name}-{}-{}", std::process::id(), nanos())
}

/// Live processes whose command line contains `marker` (zombies have an empty one).
fn live_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!("{}: {cmdline}", name.to_string_lossy()));
        }
    }
    found
}

/// The default composition's job stack over the real local executor.
struct Stack {
    ctx: Context,
    tools: Arc<ToolRegistry>,
    service: Arc<SubprocessService>,
}

impl Stack {
    fn new() -> Arc<Self> {
        let ctx = Context::new();
        ctx.load_default::<ToolsPlugin>().expect("tools");
        ctx.load_default::<SystemPromptPlugin>().expect("prompt");
        ctx.load_default::<AgentsPlugin>().expect("agents");
        ctx.load::<ShellEnvPlugin>(ShellEnvConfig { dsh_home: Some("/h/dsh".into()) }).expect("shell-env");
        let service = SubprocessService::new();
        let config = LocalBashConfig { grace_ms: 200.0, ..LocalBashConfig::default() };
        let executor: Arc<dyn ShellExecutor> =
            Arc::new(LocalBashExecutor::new(config, Arc::clone(&service)).expect("executor"));
        ctx.provide(SHELL, executor).expect("shell");
        ctx.load_default::<JobsPlugin>().expect("jobs");
        ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
        ctx.load_default::<ToolBash>().expect("tool-bash");
        let tools = ctx.get(TOOLS).expect("tools");
        Arc::new(Self { ctx, tools, service })
    }

    fn session(&self, id: String) -> Arc<Agent> {
        let agent = Agent::new(id, None);
        self.ctx.get(AGENTS).expect("agents").register(Arc::clone(&agent)).expect("register");
        agent
    }

    async fn call(&self, tool: &str, args: Value, agent: &Arc<Agent>) -> ToolResult {
        self.tools.call(tool, args, ToolExec::new(Some(Arc::clone(agent)), "soak")).await
    }

    /// Starts `command` in the background as `agent`; returns the job id.
    async fn start(&self, command: &str, agent: &Arc<Agent>) -> String {
        let args = json!({"command": command, "description": "soak job", "run_in_background": true});
        let r = self.call("bash", args, agent).await;
        assert!(!r.is_error, "{}", r.text());
        let id = r.value.clone().expect("value")["jobId"].as_str().expect("id").to_owned();
        assert_eq!(r.text(), format!("started background job {id}"));
        id
    }

    /// One `job_output` call that must succeed; its text is checked against its value.
    async fn output(&self, agent: &Arc<Agent>, args: Value) -> Read {
        let r = self.call("job_output", args, agent).await;
        assert!(!r.is_error, "{}", r.text());
        let value = r.value.clone().expect("value");
        let read = Read {
            text: value["text"].as_str().expect("text").to_owned(),
            status: value["job"]["status"].as_str().expect("status").to_owned(),
            detail: value["job"]["detail"].as_str().map(str::to_owned),
        };
        let body = if read.text.is_empty() { "(no new output)" } else { &read.text };
        let separator = if body.ends_with('\n') { "" } else { "\n" };
        assert_eq!(r.text(), format!("{body}{separator}{}", read.status_line()));
        read
    }

    /// Disposes the composition and then the subprocess service, within a generous bound.
    async fn dispose(&self) {
        let disposal = async {
            self.ctx.dispose().await;
            self.service.dispose().await;
        };
        tokio::time::timeout(Duration::from_secs(60), disposal).await.expect("disposal finishes");
    }
}

/// One `job_output` answer.
#[derive(Clone, Debug)]
struct Read {
    text: String,
    status: String,
    detail: Option<String>,
}

impl Read {
    fn status_line(&self) -> String {
        match &self.detail {
            Some(detail) => format!("[status: {}, {detail}]", self.status),
            None => format!("[status: {}]", self.status),
        }
    }
    fn terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "killed" | "failed")
    }
}

/// What the test knows about one job.
#[derive(Debug)]
struct Job {
    id: String,
    session: usize,
    /// Everything the command prints, in order.
    expected: String,
    /// Sleeps until killed (by the test or by disposal).
    long: bool,
    /// Every text `job_output` returned, in order.
    received: String,
    kill_requested: bool,
    /// The first terminal status and detail seen, which may never change.
    terminal: Option<(String, Option<String>)>,
}

impl Job {
    /// Folds one read in: output arrives once and in order, and a terminal status is final.
    fn record(&mut self, read: &Read) {
        self.received.push_str(&read.text);
        assert!(
            self.expected.starts_with(&self.received),
            "{}: {:?} is no prefix of the output",
            self.id,
            self.received
        );
        // A kill that lands after the job's own exit reports what happened: completed.
        let allowed: &[&str] = if self.kill_requested {
            &["stopping", "killed", "completed"]
        } else if self.long {
            &["running"]
        } else {
            &["running", "completed"]
        };
        assert!(
            allowed.contains(&read.status.as_str()),
            "{}: {} (kill requested: {})",
            self.id,
            read.status_line(),
            self.kill_requested
        );
        if read.status == "completed" {
            assert_eq!(read.detail.as_deref(), Some("exit code: 0"), "{}", self.id);
        }
        if read.terminal() {
            let seen = (read.status.clone(), read.detail.clone());
            let first = self.terminal.get_or_insert_with(|| seen.clone());
            assert_eq!(*first, seen, "{}: a terminal status never changes", self.id);
        }
    }
}

type Jobs = Arc<Vec<Mutex<Job>>>;

/// A short job: a brief sleep, then `lines` numbered lines carrying the marker, with a pause
/// halfway so that reads catch it mid-output.
fn short_command(marker: &str, tag: &str, sleep_ms: usize, lines: usize) -> (String, String) {
    let half = lines / 2;
    let command = format!(
        "sleep 0.{sleep_ms:03}; for i in $(seq 1 {lines}); do echo \"{marker} {tag} line-$i\"; if [ $i = {half} ]; then sleep 0.05; fi; done"
    );
    let expected = (1..=lines).map(|i| format!("{marker} {tag} line-{i}\n")).collect();
    (command, expected)
}

/// A long job: one line, then a sleep whose own command line carries the marker.
fn long_command(marker: &str, tag: &str) -> (String, String) {
    (
        format!("echo '{marker} {tag} start'; exec -a {marker}-sleep sleep 300"),
        format!("{marker} {tag} start\n"),
    )
}

const SESSIONS: usize = 20;
const JOBS_PER_SESSION: usize = 10;
const OPS_PER_SESSION: usize = 60;

/// Whether the test kills this long job itself; the others are left to disposal.
fn killed_by_test(session: usize) -> bool {
    session.is_multiple_of(4)
}

#[derive(Default, Debug)]
struct Tally {
    reads: usize,
    waits: usize,
    kills: usize,
    lists: usize,
    fenced: usize,
}

async fn random_ops(
    stack: Arc<Stack>,
    agents: Arc<Vec<Arc<Agent>>>,
    jobs: Jobs,
    session: usize,
    seed: u64,
) -> Tally {
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    let agent = &agents[session];
    let own: Vec<usize> = (0..jobs.len()).filter(|j| jobs[*j].lock().session == session).collect();
    for _ in 0..OPS_PER_SESSION {
        let pick = own[rng.below(own.len())];
        let (id, long) = {
            let job = jobs[pick].lock();
            (job.id.clone(), job.long)
        };
        match rng.below(100) {
            0..40 => {
                let read = stack.output(agent, json!({"job_id": id})).await;
                jobs[pick].lock().record(&read);
                tally.reads += 1;
            }
            40..60 => {
                let timeout = 20 + rng.below(180);
                let read =
                    stack.output(agent, json!({"job_id": id, "wait": true, "timeout_ms": timeout})).await;
                jobs[pick].lock().record(&read);
                tally.waits += 1;
            }
            60..72 => {
                let other = (session + 1 + rng.below(SESSIONS - 1)) % SESSIONS;
                let theirs: Vec<String> = jobs
                    .iter()
                    .map(|j| j.lock())
                    .filter(|j| j.session == other)
                    .map(|j| j.id.clone())
                    .collect();
                let foreign = &theirs[rng.below(theirs.len())];
                let (tool, args) = match rng.below(3) {
                    0 => ("job_output", json!({"job_id": foreign})),
                    1 => ("job_output", json!({"job_id": foreign, "wait": true, "timeout_ms": 50})),
                    _ => ("job_kill", json!({"job_id": foreign})),
                };
                let r = stack.call(tool, args, agent).await;
                assert!(r.is_error);
                assert_eq!(r.text(), format!("Error: job {foreign} belongs to another session"));
                tally.fenced += 1;
            }
            72..80 => {
                let r = stack.call("job_list", json!({}), agent).await;
                let listed: Vec<String> = r
                    .value
                    .expect("value")
                    .as_array()
                    .expect("array")
                    .iter()
                    .map(|j| j["id"].as_str().expect("id").to_owned())
                    .collect();
                let expected: Vec<String> = own.iter().map(|j| jobs[*j].lock().id.clone()).collect();
                assert_eq!(listed, expected, "a session lists exactly its own jobs");
                tally.lists += 1;
            }
            _ => {
                let kill = if long { killed_by_test(session) } else { rng.below(8) == 0 };
                if !kill {
                    continue;
                }
                let r = stack.call("job_kill", json!({"job_id": id}), agent).await;
                assert!(!r.is_error, "{}", r.text());
                let value = r.value.clone().expect("value");
                match value["outcome"].as_str() {
                    Some("cancellation-requested") => {
                        assert_eq!(r.text(), format!("requested cancellation of job {id}"));
                        jobs[pick].lock().kill_requested = true;
                    }
                    Some("already-finished") => {
                        let job = &value["job"];
                        assert!(matches!(job["status"].as_str(), Some("completed" | "killed")), "{value}");
                        assert!(r.text().starts_with(&format!("job {id} had already finished [status: ")));
                    }
                    other => panic!("unexpected kill outcome {other:?}"),
                }
                tally.kills += 1;
            }
        }
    }
    tally
}

/// Reads every job of `session` to its end: settled jobs completely, long ones up to their
/// first line.
async fn collect(stack: Arc<Stack>, agents: Arc<Vec<Arc<Agent>>>, jobs: Jobs, session: usize) {
    let agent = &agents[session];
    for job in jobs.iter().filter(|j| j.lock().session == session) {
        let (id, waits_for_end) = {
            let job = job.lock();
            (job.id.clone(), !job.long || job.kill_requested)
        };
        for _ in 0..2000 {
            let args = if waits_for_end {
                json!({"job_id": id, "wait": true, "timeout_ms": 30_000})
            } else {
                json!({"job_id": id, "wait": true, "timeout_ms": 20})
            };
            let read = stack.output(agent, args).await;
            let mut job = job.lock();
            job.record(&read);
            let done = if waits_for_end { read.terminal() } else { job.received == job.expected };
            if done {
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_many_sessions_many_jobs_then_disposal() {
    let started = Instant::now();
    let marker = unique_marker("soak");
    let seed = nanos();
    println!("soak seed {seed}, marker {marker}");
    let mut rng = Rng::new(seed);
    let stack = Stack::new();
    let agents: Arc<Vec<Arc<Agent>>> =
        Arc::new((0..SESSIONS).map(|s| stack.session(format!("soak-{s}"))).collect());

    // 20 sessions × 10 jobs: short echo jobs, and one long sleeper in every other session.
    let mut jobs = Vec::new();
    for (session, agent) in agents.iter().enumerate() {
        for k in 0..JOBS_PER_SESSION {
            let tag = format!("s{session}-j{k}");
            let long = k == JOBS_PER_SESSION - 1 && session.is_multiple_of(2);
            let (command, expected) = if long {
                long_command(&marker, &tag)
            } else {
                short_command(&marker, &tag, 10 + rng.below(290), 1 + rng.below(80))
            };
            let id = stack.start(&command, agent).await;
            jobs.push(Mutex::new(Job {
                id,
                session,
                expected,
                long,
                received: String::new(),
                kill_requested: false,
                terminal: None,
            }));
        }
    }
    let jobs: Jobs = Arc::new(jobs);

    // Random reads, waits, kills, listings and cross-session attempts, all sessions at once.
    let tasks: Vec<_> = (0..SESSIONS)
        .map(|s| {
            tokio::spawn(random_ops(
                Arc::clone(&stack),
                Arc::clone(&agents),
                Arc::clone(&jobs),
                s,
                rng.next(),
            ))
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        let t = task.await.expect("session task");
        total.reads += t.reads;
        total.waits += t.waits;
        total.kills += t.kills;
        total.lists += t.lists;
        total.fenced += t.fenced;
    }
    // Every session's explicitly killed long job is killed now if the dice skipped it.
    for job in jobs.iter() {
        let (id, session, wanted) = {
            let job = job.lock();
            (job.id.clone(), job.session, job.long && killed_by_test(job.session) && !job.kill_requested)
        };
        if wanted {
            let r = stack.call("job_kill", json!({"job_id": id}), &agents[session]).await;
            assert_eq!(r.text(), format!("requested cancellation of job {id}"));
            job.lock().kill_requested = true;
        }
    }

    // Read everything to its end.
    let tasks: Vec<_> = (0..SESSIONS)
        .map(|s| tokio::spawn(collect(Arc::clone(&stack), Arc::clone(&agents), Arc::clone(&jobs), s)))
        .collect();
    for task in tasks {
        task.await.expect("collector task");
    }

    // Before disposal: completed jobs delivered every line exactly once, killed ones a prefix,
    // and only the long jobs left to disposal are still running.
    let mut left_running = Vec::new();
    for job in jobs.iter() {
        let job = job.lock();
        match &job.terminal {
            Some((status, detail)) if status == "completed" => {
                assert!(!job.long, "{}", job.id);
                assert_eq!(detail.as_deref(), Some("exit code: 0"));
                assert_eq!(job.received, job.expected, "{}: every line exactly once", job.id);
            }
            Some((status, detail)) => {
                assert_eq!(status, "killed", "{}", job.id);
                assert!(job.kill_requested, "{}", job.id);
                let detail = detail.as_deref().unwrap_or_default();
                assert!(
                    matches!(detail, "signal: SIGTERM" | "signal: SIGKILL" | "killed before exit"),
                    "{detail}"
                );
            }
            None => {
                assert!(job.long && !job.kill_requested, "{} never settled", job.id);
                assert_eq!(job.received, job.expected, "{}", job.id);
                left_running.push(job.id.clone());
            }
        }
    }
    assert_eq!(
        left_running.len(),
        (0..SESSIONS).filter(|s| s.is_multiple_of(2) && !killed_by_test(*s)).count()
    );
    for (session, agent) in agents.iter().enumerate() {
        let r = stack.call("job_list", json!({}), agent).await;
        for entry in r.value.expect("value").as_array().expect("array") {
            let id = entry["id"].as_str().expect("id");
            let job = jobs.iter().find(|j| j.lock().id == id).expect("known job");
            let job = job.lock();
            assert_eq!(job.session, session);
            let expected = job.terminal.as_ref().map_or("running", |(status, _)| status.as_str());
            assert_eq!(entry["status"], expected, "{id}");
        }
    }
    assert!(!live_with(&format!("{marker}-sleep")).is_empty(), "the sleepers run until disposal");

    // Disposal kills what is left; nothing carrying the marker survives it.
    stack.dispose().await;
    assert_eq!(live_with(&marker), Vec::<String>::new(), "no descendant outlives disposal");
    println!(
        "soak: {} jobs in {SESSIONS} sessions, {total:?}, {} left to disposal, {:?}",
        jobs.len(),
        left_running.len(),
        started.elapsed()
    );
}

/// 50 background jobs across 5 sessions, each printing 300 lines in three bursts; every
/// session polls its own jobs through `job_output` until each reports a terminal status. Every
/// line arrives exactly once, in order, and nothing is left unread at the terminal status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_jobs_across_five_sessions_deliver_every_line_exactly_once() {
    let marker = unique_marker("fifty");
    let stack = Stack::new();
    let agents: Arc<Vec<Arc<Agent>>> =
        Arc::new((0..5).map(|s| stack.session(format!("fifty-{s}"))).collect());
    let mut jobs = Vec::new();
    for (session, agent) in agents.iter().enumerate() {
        for k in 0..10 {
            let tag = format!("s{session}-j{k}");
            let command = format!(
                "for i in $(seq 1 300); do echo \"{marker} {tag} line-$i\"; if [ $((i % 100)) = 0 ]; then sleep 0.05; fi; done"
            );
            let expected = (1..=300).map(|i| format!("{marker} {tag} line-{i}\n")).collect();
            let id = stack.start(&command, agent).await;
            jobs.push(Mutex::new(Job {
                id,
                session,
                expected,
                long: false,
                received: String::new(),
                kill_requested: false,
                terminal: None,
            }));
        }
    }
    let jobs: Jobs = Arc::new(jobs);
    let readers: Vec<_> = (0..agents.len())
        .map(|session| {
            let (stack, agents, jobs) = (Arc::clone(&stack), Arc::clone(&agents), Arc::clone(&jobs));
            tokio::spawn(async move {
                let agent = &agents[session];
                let own: Vec<usize> =
                    (0..jobs.len()).filter(|j| jobs[*j].lock().session == session).collect();
                let mut reads = 0;
                let deadline = Instant::now() + Duration::from_secs(120);
                while own.iter().any(|j| jobs[*j].lock().terminal.is_none()) {
                    assert!(Instant::now() < deadline, "the jobs settle within a generous bound");
                    for j in &own {
                        if jobs[*j].lock().terminal.is_some() {
                            continue;
                        }
                        let id = jobs[*j].lock().id.clone();
                        let read = stack.output(agent, json!({"job_id": id})).await;
                        jobs[*j].lock().record(&read);
                        reads += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                reads
            })
        })
        .collect();
    let mut reads = 0;
    for reader in readers {
        reads += reader.await.expect("reader");
    }
    for job in jobs.iter() {
        let job = job.lock();
        assert_eq!(
            job.terminal,
            Some(("completed".to_owned(), Some("exit code: 0".to_owned()))),
            "{}",
            job.id
        );
        assert_eq!(job.received, job.expected, "{}: every line exactly once, nothing left unread", job.id);
    }
    stack.dispose().await;
    assert_eq!(live_with(&marker), Vec::<String>::new());
    println!("fifty: {} jobs read to completion in {reads} reads", jobs.len());
}
