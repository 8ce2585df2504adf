//! The canonical structured value: its construction, its output schema, and the typed
//! view the renderer and presenters read back from the logged JSON.

use dsh_core::Schema;
use dsh_core::json::js_number;
use dsh_sandbox::{NetworkMode, SandboxMode};
use dsh_shell::{CollectedOutput, ShellRunResult, ShellSandboxInfo};
use serde::Deserialize;
use serde_json::{Map, Value, json};

fn stream_value(stream: &CollectedOutput) -> Value {
    let mut m = Map::new();
    m.insert("text".into(), json!(stream.text));
    m.insert("truncated".into(), json!(stream.truncated));
    if let Some(path) = &stream.spill_path {
        m.insert("spillPath".into(), json!(path.to_string_lossy()));
    }
    Value::Object(m)
}

fn sandbox_value(info: &ShellSandboxInfo) -> Value {
    let mut m = Map::new();
    m.insert("mode".into(), json!(info.mode.as_str()));
    m.insert("denied".into(), json!(info.denied));
    if let Some(enforcement) = info.enforcement {
        m.insert("enforcement".into(), json!(enforcement.as_str()));
    }
    if let Some(runner_failed) = info.runner_failed {
        m.insert("runnerFailed".into(), json!(runner_failed));
    }
    Value::Object(m)
}

/// `{kind:'foreground', ...ShellRunResult}` in a fixed key order; optional keys are
/// omitted, never null; numbers are JS-shaped.
pub(crate) fn foreground_value(result: &ShellRunResult) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), json!("foreground"));
    m.insert("exitCode".into(), result.exit_code.map_or(Value::Null, Value::from));
    m.insert("signal".into(), result.signal.as_deref().map_or(Value::Null, Value::from));
    m.insert("timedOut".into(), json!(result.timed_out));
    m.insert("aborted".into(), json!(result.aborted));
    m.insert("timeoutMs".into(), js_number(result.timeout.millis()));
    m.insert("stdout".into(), stream_value(&result.stdout));
    m.insert("stderr".into(), stream_value(&result.stderr));
    if let Some(sandbox) = &result.sandbox {
        m.insert("sandbox".into(), sandbox_value(sandbox));
    }
    if let Some(network) = &result.network {
        let mut value = json!({ "policy": network.policy.as_str(), "denied": network.denied });
        if !network.credentials.is_empty() {
            value["credentials"] = json!(network.credentials);
        }
        m.insert("network".into(), value);
    }
    if result.out_of_memory {
        m.insert("outOfMemory".into(), json!(true));
    }
    if let Some(sandbox) = result.sandbox.as_ref().filter(|s| !s.quarantined.is_empty()) {
        m.insert("quarantined".into(), quarantined_value(&sandbox.quarantined));
    }
    if let Some(usage) = &result.usage {
        m.insert("usage".into(), serde_json::to_value(usage).unwrap_or_else(|_| json!({})));
    }
    Value::Object(m)
}

/// The `usage` object: what the command used and which limit stopped it, every key optional.
fn usage_schema() -> Schema {
    Schema::object(
        vec![
            ("cpuTimeMs", Schema::integer(), false),
            ("peakMemoryBytes", Schema::integer(), false),
            ("peakProcesses", Schema::integer(), false),
            ("processLimitReached", Schema::integer(), false),
            ("memoryLimitReached", Schema::integer(), false),
            (
                "limits",
                Schema::string().enumerated(vec![json!("cgroup-v1"), json!("cgroup-v2"), json!("rlimit")]),
                false,
            ),
        ],
        false,
    )
}

/// `[{path, movedTo, what, left}]`: the auto-run surfaces moved into quarantine.
pub(crate) fn quarantined_value(quarantined: &[dsh_sandbox::Quarantined]) -> Value {
    Value::Array(
        quarantined
            .iter()
            .map(|q| {
                json!({
                    "path": q.path.to_string_lossy(),
                    "movedTo": q.moved_to.to_string_lossy(),
                    "what": q.what,
                    "left": q.left,
                })
            })
            .collect(),
    )
}

/// `{kind:'background', jobId}`.
pub(crate) fn background_value(job_id: &str) -> Value {
    json!({ "kind": "background", "jobId": job_id })
}

fn stream_schema() -> Schema {
    Schema::object(
        vec![
            ("text", Schema::string(), true),
            ("truncated", Schema::boolean(), true),
            ("spillPath", Schema::string(), false),
        ],
        false,
    )
}

/// Output schema: exactly one of the background and foreground shapes, both closed. With
/// `network` (a network policy that isolates), the foreground shape may carry `network`;
/// with `out_of_memory` (an executor that reports it), `outOfMemory`; with `quarantine` (a
/// sandboxing executor), `quarantined`; with `usage` (an executor that measures it), `usage`.
/// With `credentials` (secrets bound to hosts), `network` may also carry `credentials`.
pub(crate) fn output_schema(
    network: bool,
    out_of_memory: bool,
    quarantine: bool,
    credentials: bool,
    usage: bool,
) -> Schema {
    let modes: Vec<Value> = SandboxMode::ALL.iter().map(|m| json!(m.as_str())).collect();
    let background = Schema::object(
        vec![
            ("kind", Schema::string().constant(json!("background")), true),
            ("jobId", Schema::string(), true),
        ],
        false,
    );
    let sandbox = Schema::object(
        vec![
            ("mode", Schema::string().enumerated(modes), true),
            ("denied", Schema::boolean(), true),
            ("enforcement", Schema::string().enumerated(vec![json!("full"), json!("partial")]), false),
            ("runnerFailed", Schema::boolean(), false),
        ],
        false,
    );
    let mut fields = vec![
        ("kind", Schema::string().constant(json!("foreground")), true),
        ("exitCode", Schema::integer().or_null(), true),
        ("signal", Schema::string().or_null(), true),
        ("timedOut", Schema::boolean(), true),
        ("aborted", Schema::boolean(), true),
        ("timeoutMs", Schema::number(), true),
        ("stdout", stream_schema(), true),
        ("stderr", stream_schema(), true),
        ("sandbox", sandbox, false),
    ];
    if network {
        let policies: Vec<Value> = NetworkMode::ALL.iter().map(|m| json!(m.as_str())).collect();
        let mut network_fields = vec![
            ("policy", Schema::string().enumerated(policies), true),
            ("denied", Schema::array(Schema::string()), true),
        ];
        if credentials {
            network_fields.push(("credentials", Schema::array(Schema::string()), false));
        }
        let network = Schema::object(network_fields, false);
        fields.push(("network", network, false));
    }
    if out_of_memory {
        fields.push(("outOfMemory", Schema::boolean(), false));
    }
    if quarantine {
        let entry = Schema::object(
            vec![
                ("path", Schema::string(), true),
                ("movedTo", Schema::string(), true),
                ("what", Schema::string(), true),
                ("left", Schema::string(), true),
            ],
            false,
        );
        fields.push(("quarantined", Schema::array(entry), false));
    }
    if usage {
        fields.push(("usage", usage_schema(), false));
    }
    let foreground = Schema::object(fields, false);
    Schema::one_of(vec![background, foreground])
}

/// One stream as logged.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StreamView {
    pub text: String,
    pub truncated: bool,
    #[serde(default)]
    pub spill_path: Option<String>,
}

/// Sandbox facts as logged (the mode is kept as spelled).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxView {
    pub mode: String,
    pub denied: bool,
    #[serde(default)]
    pub runner_failed: Option<bool>,
}

/// A foreground value as logged.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ForegroundView {
    pub exit_code: Option<i64>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub timeout_ms: f64,
    pub stdout: StreamView,
    pub stderr: StreamView,
    #[serde(default)]
    pub sandbox: Option<SandboxView>,
    #[serde(default)]
    pub network: Option<NetworkView>,
    #[serde(default)]
    pub out_of_memory: bool,
    #[serde(default)]
    pub quarantined: Vec<QuarantinedView>,
    #[serde(default)]
    pub usage: Option<UsageView>,
}

/// The usage facts the text reports, as logged.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageView {
    #[serde(default)]
    pub process_limit_reached: Option<u64>,
}

/// One quarantined auto-run surface as logged.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QuarantinedView {
    pub path: String,
    pub moved_to: String,
    pub what: String,
    pub left: String,
}

impl QuarantinedView {
    /// The line a result carries before its exit marker.
    pub(crate) fn line(&self) -> String {
        dsh_sandbox::Quarantined {
            path: self.path.clone().into(),
            moved_to: self.moved_to.clone().into(),
            what: self.what.clone(),
            left: self.left.clone(),
        }
        .line()
    }
}

/// Network facts as logged.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub(crate) struct NetworkView {
    #[allow(dead_code, reason = "read back for completeness; the text names the hosts only")]
    pub policy: String,
    pub denied: Vec<String>,
    /// `NAME added for host:port`, for each secret the proxy added to a request.
    #[serde(default)]
    pub credentials: Vec<String>,
}

/// A canonical value read back: which shape it is.
pub(crate) enum ValueView {
    Background { job_id: String },
    Foreground(Box<ForegroundView>),
}

impl ValueView {
    /// Reads a logged value; `None` when it is neither shape.
    pub(crate) fn parse(value: &Value) -> Option<Self> {
        match value.get("kind").and_then(Value::as_str)? {
            "background" => Some(ValueView::Background { job_id: value.get("jobId")?.as_str()?.to_owned() }),
            "foreground" => {
                serde_json::from_value(value.clone()).ok().map(|v| ValueView::Foreground(Box::new(v)))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::tools::validate_value;
    use dsh_sandbox::SandboxEnforcement;
    use dsh_shell::ShellTimeout;

    fn result() -> ShellRunResult {
        ShellRunResult {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            aborted: false,
            timeout: ShellTimeout::from_millis(10000.0),
            stdout: CollectedOutput {
                text: "hello\n".into(),
                truncated: false,
                spill_path: None,
                spill_error: None,
            },
            stderr: CollectedOutput::default(),
            sandbox: None,
            network: None,
            out_of_memory: false,
            usage: None,
        }
    }

    fn valid(value: &Value) -> Vec<String> {
        let mut out = Vec::new();
        validate_value(&output_schema(true, false, true, false, true), value, "output", &mut out);
        out
    }

    #[test]
    fn bf_01_value_shape_and_key_order() {
        let v = foreground_value(&result());
        assert_eq!(
            v.to_string(),
            r#"{"kind":"foreground","exitCode":0,"signal":null,"timedOut":false,"aborted":false,"timeoutMs":10000,"stdout":{"text":"hello\n","truncated":false},"stderr":{"text":"","truncated":false}}"#
        );
        assert!(valid(&v).is_empty());
    }

    #[test]
    fn optional_facts_are_present_only_when_supplied() {
        let mut r = result();
        r.exit_code = None;
        r.signal = Some("SIGTERM".into());
        r.timeout = ShellTimeout::from_millis(2.5);
        r.stdout.truncated = true;
        r.stdout.spill_path = Some("/s/out.log".into());
        r.sandbox = Some(ShellSandboxInfo {
            mode: SandboxMode::ReadOnly,
            denied: true,
            enforcement: Some(SandboxEnforcement::Partial),
            runner_failed: Some(false),
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        });
        let v = foreground_value(&r);
        assert_eq!(
            v.to_string(),
            r#"{"kind":"foreground","exitCode":null,"signal":"SIGTERM","timedOut":false,"aborted":false,"timeoutMs":2.5,"stdout":{"text":"hello\n","truncated":true,"spillPath":"/s/out.log"},"stderr":{"text":"","truncated":false},"sandbox":{"mode":"read-only","denied":true,"enforcement":"partial","runnerFailed":false}}"#
        );
        assert!(valid(&v).is_empty());
        r.sandbox = Some(ShellSandboxInfo {
            mode: SandboxMode::ReadOnly,
            denied: false,
            enforcement: None,
            runner_failed: None,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        });
        assert_eq!(foreground_value(&r)["sandbox"], json!({"mode": "read-only", "denied": false}));
    }

    #[test]
    fn timeout_ms_is_the_number_as_given() {
        let mut r = result();
        for (millis, text) in
            [(1e-7, "1e-7"), (0.1234567891, "0.1234567891"), (1e21, "1e+21"), (2147483647.0, "2147483647")]
        {
            r.timeout = ShellTimeout::from_millis(millis);
            let v = foreground_value(&r);
            assert_eq!(v["timeoutMs"], js_number(millis));
            assert_eq!(dsh_core::json::js_json_text(&v["timeoutMs"]), text);
        }
    }

    #[test]
    fn output_schema_is_closed_one_of() {
        assert!(valid(&background_value("bash-1")).is_empty());
        assert_eq!(
            valid(&json!({"kind": "background", "jobId": "bash-1", "extra": 1})),
            vec!["\"output\" must match exactly one oneOf branch (matched 0)"]
        );
        let mut v = foreground_value(&result());
        v["stdout"]["extra"] = json!(true);
        assert_eq!(valid(&v), vec!["\"output\" must match exactly one oneOf branch (matched 0)"]);
    }

    #[test]
    fn network_facts_are_in_the_value_and_the_schema_only_when_the_policy_isolates() {
        let mut r = result();
        let plain = foreground_value(&r);
        assert!(plain.get("network").is_none());
        assert!(
            !output_schema(false, false, false, false, false).to_json().to_string().contains("\"network\"")
        );
        r.network = Some(dsh_sandbox::NetworkFacts {
            policy: NetworkMode::Ask,
            denied: vec!["example.com:443".into()],
            credentials: Vec::new(),
        });
        let value = foreground_value(&r);
        assert_eq!(value["network"], json!({"policy": "ask", "denied": ["example.com:443"]}));
        let mut out = Vec::new();
        validate_value(&output_schema(true, false, true, false, true), &value, "output", &mut out);
        assert!(out.is_empty(), "{out:?}");
        let mut out = Vec::new();
        validate_value(&output_schema(false, false, false, false, false), &value, "output", &mut out);
        assert!(!out.is_empty(), "a closed schema without network refuses the key");
    }

    #[test]
    fn credential_additions_are_in_the_value_and_the_schema_only_with_bound_credentials() {
        let mut r = result();
        r.network = Some(dsh_sandbox::NetworkFacts {
            policy: NetworkMode::Deny,
            denied: Vec::new(),
            credentials: vec!["TOKEN added for api.example.com:443".into()],
        });
        let value = foreground_value(&r);
        assert_eq!(
            value["network"],
            json!({"policy": "deny", "denied": [], "credentials": ["TOKEN added for api.example.com:443"]})
        );
        let with = output_schema(true, false, true, true, false);
        let mut out = Vec::new();
        validate_value(&with, &value, "output", &mut out);
        assert!(out.is_empty(), "{out:?}");
        let without = output_schema(true, false, true, false, false);
        assert!(!without.to_json().to_string().contains("\"credentials\""), "no key without credentials");
        let mut out = Vec::new();
        validate_value(&without, &value, "output", &mut out);
        assert!(!out.is_empty(), "a schema without credentials refuses the key");
    }
}
