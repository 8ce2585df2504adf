//! Property tests: `job_output`, `job_list` and `job_kill` under arbitrary JSON arguments and
//! callers, over scripted producers.
//!
//! For every generated call the test predicts the outcome (schema stage, access fence, wait
//! rules, tool bodies) and checks it exactly: a failure is
//! `Error: <the predicted message>`, a success renders exactly the text its structured value
//! implies. Nothing may panic, and consuming reads never deliver a byte twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{AGENTS, Agent, Context, TOOLS, ToolExec, ToolRegistry};
use dsh_jobs::testing::FakeProducer;
use dsh_jobs::{JOBS, JobOutcome, JobRegistry, JobsPlugin, OutcomeStatus};
use dsh_test_support::json::{
    arb_args, arb_json, arb_number, arb_string, field, js_json_text, js_number_text,
};
use dsh_tool_jobs::{ToolJobsConfig, ToolJobsPlugin};
use parking_lot::Mutex;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::{Value, json};

const CASES: u32 = 512;

/// The default `job_output` wait and its cap in these compositions: waits stay short.
const WAIT_DEFAULT_MS: f64 = 1.0;
const WAIT_CAP_MS: f64 = 5.0;

/// The scripted jobs, in registration order, with their owners.
const JOBS_AND_OWNERS: [(&str, Option<&str>); 6] = [
    ("bash-1", Some("alice")),
    ("bash-2", Some("alice")),
    ("bash-3", None),
    ("subagent-1", None),
    ("bash-4", Some("bob")),
    ("bash-5", Some("bob")),
];

/// Everything `bash-1` will ever deliver, in two reads.
const BASH_1_READS: [&str; 2] = ["one\n", "two"];

struct Composition {
    tail_lines: bool,
    ctx: Context,
    tools: Arc<ToolRegistry>,
    jobs: Arc<dyn JobRegistry>,
    agents: BTreeMap<&'static str, Arc<Agent>>,
    /// Every text `job_output` returned for `bash-1` (only when `tail_lines` is off).
    bash_1_reads: Mutex<String>,
    _producers: Vec<Arc<FakeProducer>>,
}

impl Composition {
    async fn new(tail_lines: bool) -> Self {
        let ctx = Context::new();
        ctx.load_default::<ToolsPlugin>().expect("tools");
        ctx.load_default::<SystemPromptPlugin>().expect("prompt");
        ctx.load_default::<AgentsPlugin>().expect("agents");
        ctx.load_default::<JobsPlugin>().expect("jobs");
        let config = ToolJobsConfig {
            wait_timeout_ms: WAIT_DEFAULT_MS,
            max_wait_timeout_ms: WAIT_CAP_MS,
            tail_lines,
            ..ToolJobsConfig::default()
        };
        ctx.load::<ToolJobsPlugin>(config).expect("tool-jobs");
        let registry = ctx.get(AGENTS).expect("agents");
        let mut agents = BTreeMap::new();
        for id in ["alice", "bob"] {
            let agent = Agent::new(id, None);
            registry.register(Arc::clone(&agent)).expect("register");
            agents.insert(id, agent);
        }
        let jobs = ctx.get(JOBS).expect("jobs");
        let killed = JobOutcome::new(OutcomeStatus::Killed, "signal: SIGTERM");

        let streaming = FakeProducer::new();
        streaming.push_read(BASH_1_READS[0]).push_read(BASH_1_READS[1]).settle_on_cancel(killed.clone());
        let finished = FakeProducer::new();
        finished.push_read("done\n");
        let unowned = FakeProducer::new();
        unowned.push_read("x").settle_on_cancel(killed);
        let final_output = FakeProducer::new();
        let stubborn = FakeProducer::new();
        stubborn.fail_cancel("cancel failed");
        // Settles only when cancelled (service disposal awaits every job).
        let lingering = FakeProducer::new();
        lingering.settle_on_cancel(JobOutcome::new(OutcomeStatus::Killed, "signal: SIGKILL"));

        let owner = |id: &str| Some(Arc::clone(&agents[id]));
        let starts = [
            jobs.start(streaming.spec("bash", "stream", owner("alice"))),
            jobs.start(finished.spec("bash", "finished", owner("alice"))),
            jobs.start(unowned.spec("bash", "unowned", None)),
            jobs.start(final_output.spec_with("subagent", "research", None, false)),
            jobs.start(stubborn.spec("bash", "stubborn", owner("bob"))),
            jobs.start(lingering.spec("bash", "lingering", owner("bob"))),
        ];
        let ids: Vec<String> = starts.into_iter().map(|s| s.expect("start")).collect();
        assert_eq!(ids, JOBS_AND_OWNERS.map(|(id, _)| id.to_owned()));
        finished.complete("exit code: 0");
        final_output.settle(Ok(JobOutcome {
            status: OutcomeStatus::Completed,
            detail: Some("completed".into()),
            output: Some("the answer".into()),
        }));
        jobs.wait("bash-2", 10_000.0, Some(&agents["alice"]), None).await.expect("settles");
        jobs.wait("subagent-1", 10_000.0, None, None).await.expect("settles");
        let tools = ctx.get(TOOLS).expect("tools");
        let producers = vec![streaming, finished, unowned, final_output, stubborn, lingering];
        Self { tail_lines, ctx, tools, jobs, agents, bash_1_reads: Mutex::default(), _producers: producers }
    }
}

/// What a call is expected to produce.
#[derive(Debug, PartialEq)]
enum Expect {
    InvalidArgs,
    Error(String),
    Success,
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn type_ok(value: &Value, ty: &str) -> bool {
    match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => is_integer(value),
        "boolean" => value.is_boolean(),
        _ => unreachable!("no other parameter type"),
    }
}

/// The access fence: unknown ids, then owned jobs of another session.
fn access(id: &str, caller: Option<&str>) -> Option<String> {
    match JOBS_AND_OWNERS.iter().find(|(job, _)| *job == id) {
        None => Some(format!("unknown job {id}")),
        Some((_, Some(owner))) if caller != Some(*owner) => {
            Some(format!("job {id} belongs to another session"))
        }
        Some(_) => None,
    }
}

fn predict(tool: &str, args: &Value, caller: Option<&str>, tail_lines: bool) -> Expect {
    let Some(map) = args.as_object() else { return Expect::InvalidArgs };
    let params: Vec<(&str, &str)> = match tool {
        "job_list" => return Expect::Success,
        "job_output" if tail_lines => {
            vec![
                ("job_id", "string"),
                ("wait", "boolean"),
                ("timeout_ms", "number"),
                ("tail_lines", "integer"),
            ]
        }
        "job_output" => vec![("job_id", "string"), ("wait", "boolean"), ("timeout_ms", "number")],
        _ => vec![("job_id", "string"), ("reason", "string")],
    };
    if !map.contains_key("job_id")
        || params.iter().any(|(name, ty)| map.get(*name).is_some_and(|v| !type_ok(v, ty)))
    {
        return Expect::InvalidArgs;
    }
    let id = map["job_id"].as_str().unwrap_or_default();
    if id.is_empty() {
        return Expect::Error("invalid job_id: expected a non-empty string, got \"\"".into());
    }
    if tool == "job_kill" {
        return match access(id, caller) {
            Some(error) => Expect::Error(error),
            None if id == "bash-4" => Expect::Error("cancel failed".into()),
            None => Expect::Success,
        };
    }
    if tail_lines
        && let Some(n) = map.get("tail_lines")
        && !n.as_f64().is_some_and(|n| n >= 1.0)
    {
        return Expect::Error(format!(
            "invalid tail_lines: expected a positive integer, got {}",
            js_json_text(n)
        ));
    }
    if let Some(error) = access(id, caller) {
        return Expect::Error(error);
    }
    if map.get("wait") == Some(&Value::Bool(true)) {
        let timeout =
            map.get("timeout_ms").and_then(Value::as_f64).unwrap_or(WAIT_DEFAULT_MS).min(WAIT_CAP_MS);
        if timeout <= 0.0 {
            return Expect::Error(format!(
                "invalid wait timeout: expected a positive number of milliseconds, got {}",
                js_number_text(timeout)
            ));
        }
    }
    Expect::Success
}

/// Every failure shape the job tools and the runtime may produce, as (prefix, suffix).
const KNOWN_ERRORS: &[(&str, &str)] = &[
    ("invalid arguments: ", ""),
    ("invalid job_id: expected a non-empty string, got \"\"", ""),
    ("unknown job ", ""),
    ("job ", " belongs to another session"),
    ("invalid wait timeout: expected a positive number of milliseconds, got ", ""),
    ("invalid tail_lines: expected a positive integer, got ", ""),
    ("cancel failed", ""),
];

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), TestCaseError> {
    if ok { Ok(()) } else { Err(TestCaseError::fail(what())) }
}

fn status_line(job: &Value) -> String {
    match job.get("detail").and_then(Value::as_str) {
        Some(detail) => format!("[status: {}, {detail}]", job["status"].as_str().unwrap_or_default()),
        None => format!("[status: {}]", job["status"].as_str().unwrap_or_default()),
    }
}

/// A public snapshot is well formed: the public keys only, a known status, a detail exactly
/// when terminal (every producer here reports one).
fn check_job(job: &Value, context: &dyn Fn() -> String) -> Result<(), TestCaseError> {
    let keys: Vec<&str> = job.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
    let status = job["status"].as_str().unwrap_or_default();
    let terminal = matches!(status, "completed" | "killed" | "failed");
    let expected_keys: &[&str] = if terminal {
        &["id", "kind", "label", "status", "detail", "startedAt", "finishedAt"]
    } else {
        &["id", "kind", "label", "status", "startedAt"]
    };
    check(keys == expected_keys, || format!("snapshot keys {keys:?}: {}", context()))?;
    check(terminal || matches!(status, "running" | "stopping"), || format!("status {status}: {}", context()))
}

async fn call_and_check(
    c: &Composition,
    tool: &str,
    args: Value,
    caller: Option<&str>,
) -> Result<(), TestCaseError> {
    let expect = predict(tool, &args, caller, c.tail_lines);
    let agent = caller.map(|id| Arc::clone(&c.agents[id]));
    let result = c.tools.call(tool, args.clone(), ToolExec::new(agent, "prop-call")).await;
    let text = result.text();
    let context = || {
        format!(
            "{tool} caller={caller:?} tail={} args={args}\nexpected {expect:?}\ngot {text:?}",
            c.tail_lines
        )
    };
    c.tools.present_call(tool, &args);
    c.tools.present_result(tool, &args, &result);

    if result.is_error {
        let message = text.strip_prefix("Error: ").unwrap_or_default();
        check(KNOWN_ERRORS.iter().any(|(p, s)| message.starts_with(p) && message.ends_with(s)), || {
            format!("unknown error shape: {}", context())
        })?;
        return match &expect {
            Expect::InvalidArgs => check(message.starts_with("invalid arguments: "), context),
            Expect::Error(expected) => check(message == expected, context),
            Expect::Success => check(false, context),
        };
    }
    check(expect == Expect::Success, context)?;
    check(result.content.len() == 1, context)?;
    let value = result.value.clone().unwrap_or_default();
    match tool {
        "job_output" => {
            let id = args["job_id"].as_str().unwrap_or_default();
            let job = &value["job"];
            check(job["id"] == id, context)?;
            check_job(job, &context)?;
            let body = value["text"].as_str().unwrap_or_default();
            let body = if body.is_empty() { "(no new output)" } else { body };
            let separator = if body.ends_with('\n') { "" } else { "\n" };
            check(text == format!("{body}{separator}{}", status_line(job)), context)?;
            if id == "subagent-1" {
                check(value["text"] == "the answer", || {
                    format!("final output is repeatable: {}", context())
                })?;
            }
            if id == "bash-1" && !c.tail_lines {
                c.bash_1_reads.lock().push_str(value["text"].as_str().unwrap_or_default());
            }
            Ok(())
        }
        "job_list" => {
            let jobs = value.as_array().cloned().unwrap_or_default();
            let ids: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap_or_default()).collect();
            let visible: Vec<&str> = JOBS_AND_OWNERS
                .iter()
                .filter(|(_, owner)| owner.is_none() || *owner == caller)
                .map(|(id, _)| *id)
                .collect();
            check(ids == visible, || format!("listed {ids:?}, visible {visible:?}: {}", context()))?;
            for job in &jobs {
                check_job(job, &context)?;
            }
            let lines: Vec<String> = jobs
                .iter()
                .map(|j| {
                    let f = |k: &str| j[k].as_str().unwrap_or_default().to_owned();
                    format!("{} [{}] {} \u{2014} {}", f("id"), f("kind"), f("status"), f("label"))
                })
                .collect();
            let expected =
                if lines.is_empty() { "(no background jobs)".to_owned() } else { lines.join("\n") };
            check(text == expected, context)
        }
        _ => {
            let job = &value["job"];
            check(job["id"] == args["job_id"], context)?;
            check_job(job, &context)?;
            let id = job["id"].as_str().unwrap_or_default();
            match value["outcome"].as_str() {
                Some("cancellation-requested") => {
                    check(text == format!("requested cancellation of job {id}"), context)?;
                    check(job["status"] != "running", || {
                        format!("a requested kill leaves running: {}", context())
                    })
                }
                Some("already-finished") => {
                    check(text == format!("job {id} had already finished {}", status_line(job)), context)?;
                    check(matches!(job["status"].as_str(), Some("completed" | "killed" | "failed")), context)
                }
                _ => check(false, context),
            }
        }
    }
}

fn job_id() -> BoxedStrategy<Value> {
    let known =
        ["bash-1", "bash-2", "bash-3", "subagent-1", "bash-4", "bash-5", "bash-99", "", " bash-1", "BASH-1"];
    prop_oneof![4 => prop::sample::select(known.to_vec()).prop_map(Value::from), 1 => arb_string().prop_map(Value::String)]
        .boxed()
}

fn args_for(tool: &'static str) -> BoxedStrategy<Value> {
    let flag = prop_oneof![Just(json!(true)), Just(json!(false))].boxed();
    let timeout = prop_oneof![(1u32..10).prop_map(|t| json!(t)), arb_number()].boxed();
    let lines = prop_oneof![(0i64..4).prop_map(|n| json!(n)), arb_number()].boxed();
    match tool {
        "job_output" => arb_args(vec![
            ("job_id", 0.9, field(job_id())),
            ("wait", 0.5, field(flag)),
            ("timeout_ms", 0.5, field(timeout)),
            ("tail_lines", 0.3, field(lines)),
        ]),
        "job_kill" => arb_args(vec![("job_id", 0.9, field(job_id())), ("reason", 0.5, field(arb_json()))]),
        _ => arb_args(vec![]),
    }
}

fn arb_call() -> impl Strategy<Value = (usize, &'static str, Value, Option<&'static str>)> {
    let caller = prop::sample::select(vec![None, Some("alice"), Some("bob")]);
    let tool = prop_oneof![4 => Just("job_output"), 1 => Just("job_list"), 2 => Just("job_kill")];
    (0..2usize, tool, caller).prop_flat_map(|(composition, tool, caller)| {
        args_for(tool).prop_map(move |args| (composition, tool, args, caller))
    })
}

#[test]
fn job_tools_survive_arbitrary_arguments() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let compositions = rt.block_on(async { [Composition::new(false).await, Composition::new(true).await] });
    let cases = AtomicUsize::new(0);
    let successes = AtomicUsize::new(0);
    let mut runner =
        TestRunner::new(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(CASES) });
    let run = runner.run(&arb_call(), |(composition, tool, args, caller)| {
        cases.fetch_add(1, Ordering::SeqCst);
        let c = &compositions[composition];
        if predict(tool, &args, caller, c.tail_lines) == Expect::Success {
            successes.fetch_add(1, Ordering::SeqCst);
        }
        rt.block_on(call_and_check(c, tool, args, caller))
    });
    if let Err(failure) = run {
        panic!("{failure}");
    }
    let (cases, successes) = (cases.load(Ordering::SeqCst), successes.load(Ordering::SeqCst));
    println!(
        "job tools: {cases} arbitrary-argument cases ({successes} successes, {} errors)",
        cases - successes
    );
    assert!(cases >= CASES as usize, "{cases} cases");
    assert!(successes > 0 && successes < cases, "the generator reaches both outcomes");

    // Consuming reads delivered bash-1's output at most once and in order: what the tool
    // returned plus what is still unread is exactly what the producer emitted.
    let plain = &compositions[0];
    let alice = Arc::clone(&plain.agents["alice"]);
    let rest = plain.jobs.read("bash-1", Some(&alice)).map(|(text, _)| text).unwrap_or_default();
    let rest =
        format!("{rest}{}", plain.jobs.read("bash-1", Some(&alice)).map(|(t, _)| t).unwrap_or_default());
    assert_eq!(format!("{}{rest}", plain.bash_1_reads.lock()), BASH_1_READS.concat());
    rt.block_on(async {
        for c in compositions {
            let disposal = tokio::time::timeout(std::time::Duration::from_secs(60), c.ctx.dispose());
            disposal.await.expect("the composition disposes within a generous bound");
        }
    });
}
