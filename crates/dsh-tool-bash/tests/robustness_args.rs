//! Property tests: the `bash` tool under arbitrary JSON arguments, over a recording fake
//! executor (no random string ever reaches a real shell).
//!
//! For every generated call the test predicts the outcome (schema stage, value checks and
//! their order, escalation, background) and checks it exactly: a failure is
//! `Error: <the predicted message>` and runs nothing; a success renders exactly the text its
//! structured value implies, and the executor saw a request built from the named
//! fields only. Nothing may panic.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{FakeApproval, FakeExecutor, FakeProcess, Harness};
use dsh_core::{Agent, ApprovalOutcome, ToolExec, ToolResult};
use dsh_jobs::JobsPlugin;
use dsh_sandbox::{ESCALATION_HINT, SandboxEnforcement, SandboxMode};
use dsh_shell::{
    CollectedOutput, ProcessStatus, ShellError, ShellExecRequest, ShellExecSpec, ShellExecutor, ShellProcess,
    ShellRunResult, ShellSandboxInfo,
};
use dsh_test_support::json::{
    arb_args, arb_number, arb_string, field, js_blank, js_json_text, js_number_text,
};
use dsh_tool_bash::Config;
use dsh_tool_jobs::ToolJobsPlugin;
use parking_lot::Mutex;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::{Value, json};

const CASES: u32 = 512;

/// A sandboxing or non-sandboxing executor that records every request and answers with one
/// fixed result per composition (only the effective timeout and the policy mode vary).
struct RecordingExecutor {
    mode: Option<SandboxMode>,
    requests: Mutex<Vec<ShellExecRequest>>,
    runs: AtomicUsize,
    starts: AtomicUsize,
}

impl RecordingExecutor {
    fn new(mode: Option<SandboxMode>) -> Arc<Self> {
        Arc::new(Self {
            mode,
            requests: Mutex::default(),
            runs: AtomicUsize::new(0),
            starts: AtomicUsize::new(0),
        })
    }

    fn executed(&self) -> usize {
        self.runs.load(Ordering::SeqCst) + self.starts.load(Ordering::SeqCst)
    }
}

/// Non-sandboxing result: every stream marker plus timeout and signal.
fn rich_result(spec: &ShellExecSpec) -> ShellRunResult {
    ShellRunResult {
        exit_code: None,
        signal: Some("SIGTERM".into()),
        timed_out: true,
        aborted: false,
        timeout: spec.timeout,
        stdout: CollectedOutput {
            text: "out".into(),
            truncated: true,
            spill_path: Some("/spill/out.log".into()),
            spill_error: None,
        },
        stderr: CollectedOutput {
            text: "err\n".into(),
            truncated: false,
            spill_path: None,
            spill_error: None,
        },
        sandbox: None,
        network: None,
        out_of_memory: false,
        usage: None,
    }
}

/// Sandboxing result: a denial under the call's effective mode and a non-zero exit.
fn denied_result(spec: &ShellExecSpec) -> ShellRunResult {
    ShellRunResult {
        exit_code: Some(2),
        signal: None,
        timed_out: false,
        aborted: false,
        timeout: spec.timeout,
        stdout: CollectedOutput::default(),
        stderr: CollectedOutput::default(),
        sandbox: spec.sandbox_policy.as_ref().map(|p| ShellSandboxInfo {
            mode: p.mode,
            denied: true,
            enforcement: Some(SandboxEnforcement::Full),
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        }),
        network: None,
        out_of_memory: false,
        usage: None,
    }
}

#[async_trait::async_trait]
impl ShellExecutor for RecordingExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.mode
    }

    fn resolve(&self, request: ShellExecRequest) -> Result<ShellExecSpec, ShellError> {
        self.requests.lock().push(request.clone());
        FakeExecutor::local().resolve(request)
    }

    async fn run(&self, spec: ShellExecSpec) -> Result<ShellRunResult, ShellError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(if self.mode.is_some() { denied_result(&spec) } else { rich_result(&spec) })
    }

    fn start(&self, _spec: ShellExecSpec) -> Result<Arc<dyn ShellProcess>, ShellError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        Ok(FakeProcess::settled(ProcessStatus::Completed, Some(0), None, "ok\n", None))
    }
}

/// The compositions every generated call runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Non-sandboxing executor, jobs runtime and job tools.
    Local,
    /// Non-sandboxing executor, background disabled by config (jobs loaded anyway).
    NoBackground,
    /// Sandboxing executor (`read-only`), an approver granting once, jobs and job tools.
    Granting,
    /// Sandboxing executor, an approver rejecting, and no jobs runtime.
    Rejecting,
}

const KINDS: [Kind; 4] = [Kind::Local, Kind::NoBackground, Kind::Granting, Kind::Rejecting];

impl Kind {
    fn sandboxing(self) -> bool {
        matches!(self, Kind::Granting | Kind::Rejecting)
    }
    fn background_enabled(self) -> bool {
        self != Kind::NoBackground
    }
    fn jobs(self) -> bool {
        self != Kind::Rejecting
    }
}

struct Composition {
    kind: Kind,
    h: Harness,
    executor: Arc<RecordingExecutor>,
    agent: Arc<Agent>,
}

impl Composition {
    fn new(kind: Kind) -> Self {
        let executor = RecordingExecutor::new(kind.sandboxing().then_some(SandboxMode::ReadOnly));
        let config = Config { enable_run_in_background: kind.background_enabled(), ..Config::default() };
        let h = Harness::new(executor.clone(), config);
        if kind.jobs() {
            h.ctx.load_default::<JobsPlugin>().expect("jobs");
            h.ctx.load_default::<ToolJobsPlugin>().expect("tool-jobs");
        }
        match kind {
            Kind::Granting => h.approve_with(FakeApproval::answering(ApprovalOutcome::AllowedOnce)),
            Kind::Rejecting => h.approve_with(FakeApproval::answering(ApprovalOutcome::Rejected)),
            Kind::Local | Kind::NoBackground => {}
        }
        let agent = h.agent("prop-session", Some("/tmp"));
        Self { kind, h, executor, agent }
    }
}

/// What a call is expected to produce.
#[derive(Debug, PartialEq)]
enum Expect {
    InvalidArgs,
    Error(String),
    Foreground,
    Background,
}

impl Expect {
    fn is_error(&self) -> bool {
        matches!(self, Expect::InvalidArgs | Expect::Error(_))
    }
}

fn type_ok(value: &Value, ty: &str) -> bool {
    match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => unreachable!("no other parameter type"),
    }
}

/// The expected outcome for `args` in `kind`, called with or without an agent.
fn predict(kind: Kind, args: &Value, with_agent: bool) -> Expect {
    let Some(map) = args.as_object() else { return Expect::InvalidArgs };
    // Schema stage: only advertised parameters are checked; extra keys pass.
    let mut advertised = vec![
        ("command", "string"),
        ("description", "string"),
        ("timeoutMs", "number"),
        ("workdir", "string"),
    ];
    if kind.background_enabled() {
        advertised.push(("run_in_background", "boolean"));
    }
    if kind.sandboxing() {
        advertised.push(("sandbox_permissions", "string"));
        advertised.push(("justification", "string"));
    }
    if !map.contains_key("command") || !map.contains_key("description") {
        return Expect::InvalidArgs;
    }
    if advertised.iter().any(|(name, ty)| map.get(*name).is_some_and(|v| !type_ok(v, ty))) {
        return Expect::InvalidArgs;
    }
    if kind.sandboxing()
        && map.get("sandbox_permissions").is_some_and(|m| m != "workspace-write" && m != "danger-full-access")
    {
        return Expect::InvalidArgs;
    }
    // Value checks, first failure wins.
    let error = |m: &str| Expect::Error(m.to_owned());
    if js_blank(map["command"].as_str().unwrap_or_default()) {
        return error("invalid command: expected a non-empty string");
    }
    if js_blank(map["description"].as_str().unwrap_or_default()) {
        return error("invalid description: expected a non-empty string");
    }
    if let Some(timeout) = map.get("timeoutMs")
        && !timeout.as_f64().is_some_and(|t| t > 0.0)
    {
        return Expect::Error(format!(
            "invalid timeoutMs: expected a positive number, got {}",
            js_json_text(timeout)
        ));
    }
    let escalation = match (map.get("sandbox_permissions"), map.get("justification")) {
        (None, None) => None,
        (Some(_), None) => return error("invalid escalation: sandbox_permissions requires a justification"),
        (None, Some(_)) => {
            return error(
                "invalid escalation: justification is only valid together with sandbox_permissions",
            );
        }
        (Some(mode), Some(justification)) => {
            if justification.as_str().is_none_or(js_blank) {
                return error("invalid justification: expected a non-empty sentence");
            }
            Some(mode)
        }
    };
    if let Some(mode) = escalation {
        if !kind.sandboxing() {
            return error(
                "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)",
            );
        }
        // Enum-pinned by the schema; both targets are strictly wider than read-only.
        let mode = mode.as_str().unwrap_or_default();
        if !with_agent {
            return Expect::Error(format!(
                "sandbox escalation to \"{mode}\" requires approval, but the call has no agent to route it through"
            ));
        }
        if kind == Kind::Rejecting {
            return Expect::Error(format!("the user rejected escalating this command to \"{mode}\""));
        }
    }
    if map.get("run_in_background") == Some(&Value::Bool(true)) {
        if !kind.background_enabled() {
            return error("background execution is disabled for this bash tool");
        }
        if !kind.jobs() {
            return error(
                "background jobs unavailable: load @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs",
            );
        }
        return Expect::Background;
    }
    Expect::Foreground
}

/// Every message shape a `bash` tool error may take.
const KNOWN_ERRORS: &[&str] = &[
    "invalid arguments: ",
    "invalid command: expected a non-empty string",
    "invalid description: expected a non-empty string",
    "invalid timeoutMs: expected a positive number, got ",
    "invalid escalation: sandbox_permissions requires a justification",
    "invalid escalation: justification is only valid together with sandbox_permissions",
    "invalid justification: expected a non-empty sentence",
    "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)",
    "sandbox escalation to \"",
    "the user rejected escalating this command to \"",
    "background execution is disabled for this bash tool",
    "background jobs unavailable: load @deepseek-ai/dsh-jobs and @deepseek-ai/dsh-tool-jobs",
];

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), TestCaseError> {
    if ok { Ok(()) } else { Err(TestCaseError::fail(what())) }
}

/// The effective timeout the fake reports: the argument when valid, else its default.
fn effective_timeout(args: &Value) -> f64 {
    args.get("timeoutMs").and_then(Value::as_f64).unwrap_or(10000.0)
}

/// The mode a sandboxing call runs under: the granted one, else the standing `read-only`.
fn effective_mode(args: &Value) -> &str {
    match (args.get("sandbox_permissions"), args.get("justification")) {
        (Some(Value::String(mode)), Some(_)) => mode,
        _ => "read-only",
    }
}

fn expected_foreground(kind: Kind, args: &Value) -> (String, Value) {
    let timeout = effective_timeout(args);
    if kind.sandboxing() {
        let mode = effective_mode(args);
        let text = format!(
            "(no output)\n[sandbox: file access denied under {mode} mode]\n{ESCALATION_HINT}\n[exit code: 2]"
        );
        let value = json!({
            "kind": "foreground", "exitCode": 2, "signal": null, "timedOut": false, "aborted": false,
            "timeoutMs": timeout,
            "stdout": {"text": "", "truncated": false}, "stderr": {"text": "", "truncated": false},
            "sandbox": {"mode": mode, "denied": true, "enforcement": "full"}
        });
        (text, value)
    } else {
        let text = format!(
            "out\n[output truncated; full output: /spill/out.log]\n[stderr]\nerr\n[timed out after {}ms]\n[killed by signal: SIGTERM]",
            js_number_text(timeout)
        );
        let value = json!({
            "kind": "foreground", "exitCode": null, "signal": "SIGTERM", "timedOut": true, "aborted": false,
            "timeoutMs": timeout,
            "stdout": {"text": "out", "truncated": true, "spillPath": "/spill/out.log"},
            "stderr": {"text": "err\n", "truncated": false}
        });
        (text, value)
    }
}

/// Compares two JSON values key by key, numbers by value (so `10000` equals `10000.0`), and
/// key order too.
fn same_json(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|((ka, va), (kb, vb))| ka == kb && same_json(va, vb))
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_json(x, y))
        }
        (a, b) => a == b,
    }
}

/// The request the executor saw was built from the named fields only.
fn check_request(
    c: &Composition,
    args: &Value,
    with_agent: bool,
    background: bool,
) -> Result<(), TestCaseError> {
    let request = c.executor.requests.lock().last().cloned().expect("a request");
    check(Some(request.command.as_str()) == args["command"].as_str(), || "command passed verbatim".into())?;
    check(request.timeout_ms == args.get("timeoutMs").and_then(Value::as_f64), || {
        format!("timeout {:?} from {:?}", request.timeout_ms, args.get("timeoutMs"))
    })?;
    check(request.env.is_none() && request.stdin.is_none() && request.stdout_max_bytes.is_none(), || {
        "model keys never reach env/stdin/stdoutMaxBytes".into()
    })?;
    check(request.signal.is_some() != background, || {
        "only foreground requests carry the call signal".into()
    })?;
    if let Some(workdir) = args["workdir"].as_str().filter(|w| w.starts_with('/')) {
        check(request.workdir.as_deref() == Some(std::path::Path::new(workdir)), || {
            format!("absolute workdir verbatim: {:?}", request.workdir)
        })?;
    }
    let env = request.dsh_env.clone().unwrap_or_default();
    check(env.get("DSH_SHELL").map(String::as_str) == Some("1"), || "DSH_SHELL=1".into())?;
    check(env.get("DSH_HOME").map(String::as_str) == Some("/h/dsh"), || "DSH_HOME".into())?;
    let session = env.get("DSH_SESSION_ID").map(String::as_str);
    check(session == with_agent.then_some("prop-session"), || format!("DSH_SESSION_ID {session:?}"))?;
    let mode = request.sandbox_policy.as_ref().map(|p| p.mode.as_str());
    let expected_mode = c.kind.sandboxing().then(|| effective_mode(args));
    check(mode == expected_mode, || format!("sandbox policy mode {mode:?}, expected {expected_mode:?}"))
}

async fn call_and_check(c: &Composition, args: Value, with_agent: bool) -> Result<(), TestCaseError> {
    let expect = predict(c.kind, &args, with_agent);
    let executed = c.executor.executed();
    let agent = with_agent.then(|| Arc::clone(&c.agent));
    let result: ToolResult =
        c.h.tools.call("bash", args.clone(), ToolExec::new(agent.clone(), "prop-call")).await;
    let text = result.text();
    let context =
        || format!("{:?} agent={with_agent} args={args}\nexpected {expect:?}\ngot {text:?}", c.kind);

    // Presenters must never panic, whatever they were handed.
    let card = c.h.tools.present_result("bash", &args, &result);
    c.h.tools.present_call("bash", &args);

    if result.is_error {
        let message = text.strip_prefix("Error: ").unwrap_or_default();
        check(KNOWN_ERRORS.iter().any(|p| message.starts_with(p)), || {
            format!("unknown error shape: {}", context())
        })?;
        check(result.error.as_ref().map(|e| e.message.as_str()) == Some(message), context)?;
        check(c.executor.executed() == executed, || format!("a failed call ran something: {}", context()))?;
        match &expect {
            Expect::InvalidArgs => {
                check(message.starts_with("invalid arguments: "), context)?;
                let code = result.error.as_ref().and_then(|e| e.info.as_ref()).map(|i| i.code.as_str());
                check(code == Some("INVALID_ARGS"), context)?;
                check(card.is_none(), || format!("invalid args give no result card: {}", context()))?;
            }
            Expect::Error(expected) => check(message == expected, context)?,
            Expect::Foreground | Expect::Background => check(false, context)?,
        }
        return Ok(());
    }

    let value = result.value.clone().unwrap_or_default();
    check(result.content.len() == 1, || format!("exactly one text block: {}", context()))?;
    match expect {
        Expect::Foreground => {
            let (expected_text, expected_value) = expected_foreground(c.kind, &args);
            check(text == expected_text, || format!("text: {}\nwanted {expected_text:?}", context()))?;
            check(same_json(&value, &expected_value), || format!("value {value}: {}", context()))?;
            check(c.executor.runs.load(Ordering::SeqCst) > 0, context)?;
            let (body, pill) = if c.kind.sandboxing() {
                (text.strip_suffix("\n[exit code: 2]"), ("exitCode", json!(2)))
            } else {
                (text.strip_suffix("\n[killed by signal: SIGTERM]"), ("signal", json!("SIGTERM")))
            };
            let mut expected_card = json!({"card": "terminal", "output": body});
            expected_card[pill.0] = pill.1;
            check(card == Some(expected_card), || format!("card {card:?}: {}", context()))?;
            check_request(c, &args, with_agent, false)
        }
        Expect::Background => {
            let id = value["jobId"].as_str().unwrap_or_default().to_owned();
            check(value == json!({"kind": "background", "jobId": id}), context)?;
            check(text == format!("started background job {id}"), context)?;
            check(
                id.strip_prefix("bash-")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
                context,
            )?;
            check_request(c, &args, with_agent, true)?;
            // The job is real: its owner reads it to completion through the job tools.
            let read =
                c.h.tools
                    .call(
                        "job_output",
                        json!({"job_id": id, "wait": true, "timeout_ms": 10000}),
                        ToolExec::new(agent, "read"),
                    )
                    .await;
            check(read.text() == "ok\n[status: completed, exit code: 0]", || {
                format!("job read {:?}: {}", read.text(), context())
            })
        }
        Expect::InvalidArgs | Expect::Error(_) => {
            check(false, || format!("unexpected success: {}", context()))
        }
    }
}

fn plain_text() -> BoxedStrategy<Value> {
    "[A-Za-z][a-z ]{0,20}".prop_map(Value::String).boxed()
}

fn plausible_command() -> BoxedStrategy<Value> {
    "[a-z][a-z0-9 ;|&$()'\"-]{0,30}".prop_map(Value::String).boxed()
}

fn plausible_timeout() -> BoxedStrategy<Value> {
    prop_oneof![
        2 => (1u32..200_000).prop_map(|t| json!(t)),
        1 => (0.001f64..1e6).prop_map(|t| json!(t)),
        2 => arb_number(),
    ]
    .boxed()
}

fn plausible_workdir() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(json!("/tmp")),
        Just(json!("sub/../dir")),
        Just(json!("../..")),
        arb_string().prop_map(Value::String),
        arb_string().prop_map(|s| json!(format!("/{s}"))),
    ]
    .boxed()
}

fn plausible_mode() -> BoxedStrategy<Value> {
    prop_oneof![
        2 => Just(json!("workspace-write")),
        2 => Just(json!("danger-full-access")),
        1 => Just(json!("read-only")),
        1 => arb_string().prop_map(Value::String),
    ]
    .boxed()
}

fn flag() -> BoxedStrategy<Value> {
    prop_oneof![Just(json!(true)), Just(json!(false))].boxed()
}

/// Anything at all in every parameter, plus random keys.
fn wild_args() -> BoxedStrategy<Value> {
    let text = arb_string().prop_map(Value::String).boxed();
    let command = prop_oneof![3 => plausible_command(), 1 => text.clone()].boxed();
    arb_args(vec![
        ("command", 0.8, field(command)),
        ("description", 0.8, field(text.clone())),
        ("timeoutMs", 0.8, field(plausible_timeout())),
        ("workdir", 0.8, field(plausible_workdir())),
        ("run_in_background", 0.8, field(flag())),
        ("sandbox_permissions", 0.8, field(plausible_mode())),
        ("justification", 0.8, field(text)),
    ])
}

/// Well-typed calls with mostly valid values, so success paths are reached as often as the
/// value checks; the escalation fields come as a pair or not at all, now and then alone.
fn plausible_args() -> BoxedStrategy<Value> {
    let escalation = prop_oneof![
        4 => Just(None),
        3 => (plausible_mode(), prop_oneof![3 => plain_text(), 1 => arb_string().prop_map(Value::String)])
            .prop_map(|(m, j)| Some((Some(m), Some(j)))),
        1 => plausible_mode().prop_map(|m| Some((Some(m), None))),
        1 => plain_text().prop_map(|j| Some((None, Some(j)))),
    ];
    let base = arb_args(vec![
        (
            "command",
            1.0,
            prop_oneof![9 => plausible_command(), 1 => arb_string().prop_map(Value::String)].boxed(),
        ),
        (
            "description",
            1.0,
            prop_oneof![9 => plain_text(), 1 => arb_string().prop_map(Value::String)].boxed(),
        ),
        ("timeoutMs", 0.5, plausible_timeout()),
        ("workdir", 0.4, plausible_workdir()),
        ("run_in_background", 0.4, flag()),
    ]);
    (base, escalation)
        .prop_map(|(mut args, escalation)| {
            if let (Some(map), Some((mode, justification))) = (args.as_object_mut(), escalation) {
                if let Some(mode) = mode {
                    map.insert("sandbox_permissions".into(), mode);
                }
                if let Some(justification) = justification {
                    map.insert("justification".into(), justification);
                }
            }
            args
        })
        .boxed()
}

fn bash_args() -> BoxedStrategy<Value> {
    prop_oneof![1 => wild_args(), 2 => plausible_args()].boxed()
}

#[test]
fn bash_tool_survives_arbitrary_arguments() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let compositions: Vec<Composition> =
        rt.block_on(async { KINDS.iter().map(|k| Composition::new(*k)).collect() });
    let cases = AtomicUsize::new(0);
    let successes = AtomicUsize::new(0);
    let mut runner =
        TestRunner::new(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(CASES) });
    let strategy = (0..KINDS.len(), any::<bool>(), bash_args());
    let run = runner.run(&strategy, |(kind, with_agent, args)| {
        cases.fetch_add(1, Ordering::SeqCst);
        let c = &compositions[kind];
        let success = !predict(c.kind, &args, with_agent).is_error();
        rt.block_on(call_and_check(c, args, with_agent))?;
        if success {
            successes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    });
    if let Err(failure) = run {
        panic!("{failure}");
    }
    let (cases, successes) = (cases.load(Ordering::SeqCst), successes.load(Ordering::SeqCst));
    println!("bash: {cases} arbitrary-argument cases ({successes} successes, {} errors)", cases - successes);
    assert!(cases >= CASES as usize, "{cases} cases");
    assert!(successes > 0 && successes < cases, "the generator reaches both outcomes");
    rt.block_on(async {
        for c in compositions {
            let disposal = tokio::time::timeout(std::time::Duration::from_secs(60), c.h.ctx.dispose());
            disposal.await.expect("the composition disposes within a generous bound");
        }
    });
}
