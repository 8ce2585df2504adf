//! The tool's definition: schema, description variants, prompt section, lifecycle, load guard
//! and cache stability (PS-01..PS-03, SB-01, JB-07 schema side).

mod common;

use std::sync::Arc;

use common::{FakeExecutor, Harness};
use dsh_core::{Context, PromptSection, SYSTEM_PROMPT, TOOLS};
use dsh_sandbox::{SANDBOX_POLICY, SandboxMode};
use dsh_sandbox_policy::{LocalSandboxPolicy, SandboxPolicyConfig};
use dsh_shell::SHELL;
use dsh_tool_bash::{Config, INJECT, NAME, ToolBash};
use serde_json::{Value, json};

const SECTION: &str =
    "Check the [exit code: N] marker on every bash result; investigate failures before moving on.";

fn property_names(parameters: &Value) -> Vec<String> {
    parameters["properties"].as_object().expect("properties").keys().cloned().collect()
}

#[test]
fn plugin_contract_constants() {
    assert_eq!(NAME, "@deepseek-ai/dsh-tool-bash");
    assert_eq!(INJECT, ["tools", "shell", "systemPrompt", "shellEnv"]);
    use dsh_core::Plugin;
    assert_eq!(<ToolBash as Plugin>::SHORT_NAME, "tool-bash");
    assert_eq!(
        Config::default(),
        Config { enable_run_in_background: true, persist: dsh_tool_bash::Persist::None, tty: false }
    );
    let persisting: Config = serde_json::from_value(json!({"persist": "env"})).expect("persist");
    assert_eq!(persisting.persist, dsh_tool_bash::Persist::Env);
    assert!(serde_json::from_value::<Config>(json!({"persist": "everything"})).is_err());
    let parsed: Config = serde_json::from_value(json!({})).expect("empty config");
    assert!(parsed.enable_run_in_background, "the default applies to {{}}");
    let off: Config = serde_json::from_value(json!({"enableRunInBackground": false})).expect("config");
    assert!(!off.enable_run_in_background);
    assert!(serde_json::from_value::<Config>(json!({"enable_run_in_background": false})).is_err());
}

#[test]
fn ps_01_bash_section_order() {
    let ctx = Harness::base();
    let prompt = ctx.get(SYSTEM_PROMPT).expect("prompt");
    let _before = prompt.register_section("test:before-bash", 104.0, "before").expect("section");
    let _after = prompt.register_section("test:after-bash", 106.0, "after").expect("section");
    ctx.provide(SHELL, FakeExecutor::local() as Arc<dyn dsh_shell::ShellExecutor>).expect("shell");
    ctx.load_default::<ToolBash>().expect("tool-bash");
    let sections = prompt.sections();
    let names: Vec<&str> = sections.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["harness:identity", "deployment:persona", "test:before-bash", "tool:bash", "test:after-bash"]
    );
    assert_eq!(sections[3], PromptSection { name: "tool:bash".into(), order: 105.0, text: SECTION.into() });
}

#[tokio::test]
async fn ps_02_lifecycle() {
    // Loading the tool before any executor registers nothing.
    let ctx = Harness::base();
    ctx.load_default::<ToolBash>().expect("pending load");
    let tools = ctx.get(TOOLS).expect("tools");
    let prompt = ctx.get(SYSTEM_PROMPT).expect("prompt");
    assert!(tools.schemas().is_empty());
    assert!(!prompt.sections().iter().any(|s| s.name == "tool:bash"));
    let status = ctx.plugins().into_iter().find(|p| p.short_name == "tool-bash").expect("row");
    assert_eq!((status.applied, status.missing), (false, vec!["shell".to_owned()]));

    // The executor appears: exactly one bash schema.
    ctx.provide(SHELL, FakeExecutor::local() as Arc<dyn dsh_shell::ShellExecutor>).expect("shell");
    let names: Vec<String> = tools.schemas().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["bash"]);

    // Unloading removes the schema and the section.
    ctx.unload("tool-bash").await.expect("unload");
    assert!(tools.schemas().is_empty());
    let sections: Vec<String> = prompt.sections().into_iter().map(|s| s.name).collect();
    assert_eq!(sections, ["harness:identity", "deployment:persona"]);

    // Withdrawing the executor puts a reloaded tool back to pending.
    ctx.load_default::<ToolBash>().expect("reload");
    assert_eq!(tools.schemas().len(), 1);
    ctx.withdraw("shell").await;
    assert!(tools.schemas().is_empty());
    assert!(!prompt.sections().iter().any(|s| s.name == "tool:bash"));
}

fn expected_parameters(background: bool, sandbox: bool) -> Value {
    let mut properties = json!({
        "command": {"type": "string", "description": "The bash command to execute."},
        "description": {"type": "string", "description": "Clear, concise description of what this command does in active voice, 5-10 words (shown in the UI). Examples: \"ls\" → \"List files in current directory\"; \"git status\" → \"Show working tree status\"; \"npm install\" → \"Install package dependencies\"."},
        "timeoutMs": {"type": "number", "description": "Timeout in milliseconds. The executor applies its configured default and cap, and kills the command on expiry."},
        "workdir": {"type": "string", "description": "Working directory for this command. Defaults to the session workspace; a relative path is resolved against it."},
    });
    if background {
        properties["run_in_background"] = json!({"type": "boolean", "description": "Run in the background and return a job id immediately (collect with job_output, stop with job_kill). No timeout applies."});
    }
    if sandbox {
        properties["sandbox_permissions"] = json!({"type": "string", "description": "The wider sandbox mode this command needs. Only valid as a one-shot retry of a command the sandbox just denied; requires justification and user approval.", "enum": ["workspace-write", "danger-full-access"]});
        properties["justification"] = json!({"type": "string", "description": "Required with sandbox_permissions: one sentence for the user explaining why this exact command needs the wider access."});
    }
    json!({"type": "object", "properties": properties, "required": ["command", "description"]})
}

const BASE: &str = "Execute a bash command (`bash -c`) and return its stdout/stderr. Each call runs in a fresh shell: no state (cwd, variables, functions) persists between calls — pass `workdir` instead of using `cd`. Non-zero exits are reported as `[exit code: N]`. Current harness environment facts are exposed through managed `$DSH_*` variables; inspect them when needed. Commands may run under a file sandbox; a blocked file operation is reported as `[sandbox: file access denied under <mode> mode]` — a policy denial, not a bug in the command; do not retry another way. Long output is truncated to its tail; the full output is saved to a file whose path is reported when available. ";
const BG_ON: &str = "Set `run_in_background: true` for long-running commands: the call returns a job id immediately; read its output with `job_output` and stop it with `job_kill`.";
const BG_OFF: &str =
    "Background execution is not available; long-running commands must finish within the timeout.";

#[test]
fn ps_03_default_schema() {
    let h = Harness::with(FakeExecutor::local());
    let names: Vec<String> = h.tools.schemas().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["bash"]);
    let schema = h.schema();
    assert_eq!(schema.parameters, expected_parameters(true, false));
    assert_eq!(
        property_names(&schema.parameters),
        ["command", "description", "timeoutMs", "workdir", "run_in_background"]
    );
    assert_eq!(schema.description, format!("{BASE}{BG_ON}"));
    assert!(schema.description.contains("job_output") && schema.description.contains("$DSH_*"));
    assert!(!schema.description.contains("DSH_SESSION_JSONL"));
    assert!(!schema.description.contains("approval prompt"));
    // Byte-exact serialization (key order included).
    assert_eq!(schema.parameters.to_string(), expected_parameters(true, false).to_string());
}

#[test]
fn jb_07_disabled_background_schema() {
    let h =
        Harness::new(FakeExecutor::local(), Config { enable_run_in_background: false, ..Config::default() });
    let schema = h.schema();
    assert_eq!(property_names(&schema.parameters), ["command", "description", "timeoutMs", "workdir"]);
    assert_eq!(schema.parameters.to_string(), expected_parameters(false, false).to_string());
    assert_eq!(schema.description, format!("{BASE}{BG_OFF}"));
    assert!(schema.description.contains("Background execution is not available"));
    assert!(!schema.description.contains("run_in_background"));
}

#[test]
fn sb_01_load_guard_and_advertisement() {
    // A sandboxing executor without a policy service: load fails loudly.
    let ctx = Harness::base();
    ctx.provide(SHELL, FakeExecutor::sandboxing() as Arc<dyn dsh_shell::ShellExecutor>).expect("shell");
    let err = ctx.load_default::<ToolBash>().expect_err("guard");
    assert_eq!(
        err.to_string(),
        "tool-bash: the mounted bash executor confines but ctx.sandboxPolicy is missing"
    );
    assert!(ctx.get(TOOLS).expect("tools").schemas().is_empty());
    assert!(!ctx.get(SYSTEM_PROMPT).expect("prompt").sections().iter().any(|s| s.name == "tool:bash"));

    // Any defined mode counts, even danger-full-access.
    let ctx = Harness::base();
    ctx.provide(
        SHELL,
        FakeExecutor::new(Some(SandboxMode::DangerFullAccess)) as Arc<dyn dsh_shell::ShellExecutor>,
    )
    .expect("shell");
    assert!(ctx.load_default::<ToolBash>().is_err());

    // S-SBX: escalation advertised.
    let h = Harness::with(FakeExecutor::sandboxing());
    let schema = h.schema();
    assert_eq!(schema.parameters, expected_parameters(true, true));
    assert_eq!(
        property_names(&schema.parameters),
        [
            "command",
            "description",
            "timeoutMs",
            "workdir",
            "run_in_background",
            "sandbox_permissions",
            "justification"
        ]
    );
    assert_eq!(
        schema.parameters["properties"]["sandbox_permissions"]["enum"],
        json!(["workspace-write", "danger-full-access"])
    );
    assert!(schema.description.contains("approval prompt"));
    assert!(
        schema.description.starts_with(&format!("{BASE}{BG_ON} Attempting a command the sandbox may deny"))
    );
    assert!(
        schema.description.ends_with("but it does not forbid attempting or escalating other commands later.")
    );

    // S-LOCAL: neither key.
    let local = Harness::with(FakeExecutor::local()).schema();
    assert!(local.parameters["properties"].get("sandbox_permissions").is_none());
    assert!(local.parameters["properties"].get("justification").is_none());
}

/// A schema and prompt fingerprint a prefix cache would see.
fn fingerprint(ctx: &Context) -> (String, String) {
    let schemas = ctx.get(TOOLS).expect("tools").schemas();
    let schemas: Vec<Value> = schemas.iter().map(dsh_core::tools::schema_json).collect();
    (Value::Array(schemas).to_string(), ctx.get(SYSTEM_PROMPT).expect("prompt").render())
}

#[tokio::test]
async fn cache_stability_across_calls_runs_and_mode_switches() {
    let h = Harness::with(FakeExecutor::sandboxing());
    let before = fingerprint(&h.ctx);
    let agent = h.agent("s1", Some("/tmp"));
    let policy = h.ctx.get(SANDBOX_POLICY).expect("policy");
    h.call_as(&agent, json!({"command": "true", "description": "d"})).await;
    policy.set_sandbox_mode(agent.session(), SandboxMode::WorkspaceWrite).expect("switch");
    h.call_as(&agent, json!({"command": "true", "description": "d"})).await;
    policy.set_sandbox_mode(agent.session(), SandboxMode::DangerFullAccess).expect("switch");
    h.call(json!({"command": "true", "description": "d"})).await;
    assert_eq!(fingerprint(&h.ctx), before, "byte-identical across calls and mode switches");

    // Another run of the same composition yields the same bytes.
    let again = Harness::with(FakeExecutor::sandboxing());
    assert_eq!(fingerprint(&again.ctx), before);

    // Only a config change or the executor's capabilities change them.
    let off = Harness::new(
        FakeExecutor::sandboxing(),
        Config { enable_run_in_background: false, ..Config::default() },
    );
    assert_ne!(fingerprint(&off.ctx).0, before.0);
    let local = Harness::with(FakeExecutor::local());
    assert_ne!(fingerprint(&local.ctx).0, before.0);
    assert_eq!(fingerprint(&local.ctx).1, before.1, "the section is the same in every variant");
}

#[test]
fn sandboxing_composition_with_policy_loaded_first_applies() {
    let ctx = Harness::base();
    let policy: Arc<dyn dsh_sandbox::SandboxPolicyService> =
        Arc::new(LocalSandboxPolicy::new(&SandboxPolicyConfig::default()).expect("policy"));
    ctx.load_default::<ToolBash>().expect("pending");
    ctx.provide(SANDBOX_POLICY, policy).expect("policy");
    ctx.provide(SHELL, FakeExecutor::sandboxing() as Arc<dyn dsh_shell::ShellExecutor>).expect("applies");
    assert_eq!(ctx.get(TOOLS).expect("tools").schemas().len(), 1);
}
