//! Composition files and switches: bad input is one line on stderr and exit 2.

use crate::harness::{Sandbox, run};

fn with_config(toml: &str, args: &[&str]) -> crate::harness::Run {
    let sandbox = Sandbox::new();
    let config = sandbox.write("dsh.toml", toml);
    let mut full = vec!["--config", config.to_str().expect("utf-8")];
    full.extend_from_slice(args);
    sandbox.run(&full, "")
}

#[test]
fn unknown_plugin_in_list() {
    let out = with_config("plugins = [\"tools\", \"nope\"]\n", &["prompt"]);
    let line = out.assert_usage_error();
    assert!(line.contains(": unknown plugin \"nope\" (known: tools, system-prompt, "), "{line}");
}

#[test]
fn unknown_plugin_table() {
    let out = with_config("[nope]\nx = 1\n", &["prompt"]);
    let line = out.assert_usage_error();
    assert!(line.contains(": unknown plugin \"nope\""), "{line}");
}

#[test]
fn unknown_config_key() {
    let out = with_config("[system-prompt]\npersonae = \"x\"\n", &["prompt"]);
    let line = out.assert_usage_error();
    assert!(line.contains(": [system-prompt] unknown field `personae`"), "{line}");
}

#[test]
fn wrong_config_type() {
    let out = with_config("[system-prompt]\npersona = 3\n", &["prompt"]);
    let line = out.assert_usage_error();
    assert!(
        line.ends_with("[system-prompt] persona: invalid type: integer `3`, expected a string"),
        "{line}"
    );
}

#[test]
fn unparseable_toml() {
    let out = with_config("[system-prompt\npersona = 3\n", &["prompt"]);
    let line = out.assert_usage_error();
    assert!(line.contains(": TOML parse error at line 1, column "), "{line}");
}

#[test]
fn missing_config_file() {
    let out = run(&["--config", "does-not-exist.toml", "prompt"]);
    let line = out.assert_usage_error();
    assert!(line.starts_with("dsh-bash: config does-not-exist.toml: "), "{line}");
}

#[test]
fn config_values_reach_plugins() {
    let out = with_config("[system-prompt]\npersona = \"Be brief.\"\n", &["prompt"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with("You are an AI agent powered by DeepSeek Harness.\n\nBe brief.\n\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn pending_plugins_are_an_error_naming_their_missing_services() {
    let out = with_config("plugins = [\"tools\", \"approval\"]\n", &["call", "nope", "{}"]);
    let line = out.assert_usage_error();
    assert_eq!(line, "dsh-bash: plugins stayed pending: approval (missing \"systemPrompt\")");
}

#[test]
fn doctor_reports_pending_plugins_instead_of_failing() {
    let out = with_config("plugins = [\"tools\", \"approval\"]\n", &["doctor"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stdout
            .contains("\n  approval (@deepseek-ai/dsh-user-approval): pending (missing \"systemPrompt\")\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("\n  tools (@deepseek-ai/dsh-tools): applied\n"), "{}", out.stdout);
}

#[test]
fn workspace_root_must_be_a_directory() {
    let out = run(&["--workspace-root", "/nonexistent-dsh-root", "prompt"]);
    let line = out.assert_usage_error();
    assert!(line.ends_with("--workspace-root /nonexistent-dsh-root: not a directory"), "{line}");
}

#[test]
fn executor_config_is_validated_at_load() {
    let out = with_config("[bash-local]\ngraceMs = 0\n", &["prompt"]);
    assert_eq!(out.assert_usage_error(), "dsh-bash: bash-local: graceMs must be a positive finite number");
    let out = with_config("[bash-local]\ngraceMs = \"soon\"\n", &["prompt"]);
    let line = out.assert_usage_error();
    assert!(
        line.contains("[bash-local] graceMs: invalid type: string \"soon\", expected a number"),
        "{line}"
    );
}

#[test]
fn doctor_reports_a_configured_spill_directory() {
    let sandbox = Sandbox::new();
    let spill = sandbox.path().join("spill");
    let config =
        sandbox.write("dsh.toml", &format!("[subprocess]\nspillDir = {}\n", serde_json::json!(spill)));
    let out = sandbox.run(&["--config", config.to_str().expect("utf-8"), "doctor"], "");
    assert!(out.stdout.contains(&format!("\nspill directory: {}\n", spill.display())), "{}", out.stdout);
}

#[test]
fn doctor_reports_host_facts_and_the_default_composition() {
    let out = run(&["doctor"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[1].starts_with("bash: /") && lines[1].contains("GNU bash"), "{}", out.stdout);
    assert!(out.stdout.contains("\nsandbox provider: sandbox-local\nselected runner: "), "{}", out.stdout);
    let composition = out.stdout.split("\ncomposition:\n").nth(1).expect("composition section");
    // The plugin lines, indented; the verdict line follows them.
    let plugins: Vec<&str> = composition.lines().take_while(|l| l.starts_with("  ")).collect();
    let names: Vec<&str> = plugins.iter().map(|l| l.trim().split(' ').next().expect("name")).collect();
    assert_eq!(
        names,
        [
            "tools",
            "system-prompt",
            "agent",
            "session-jsonl",
            "subprocess",
            "bash-local",
            "shell-env",
            "jobs",
            "tool-jobs",
            "tool-bash"
        ]
    );
    assert!(plugins.iter().all(|l| l.ends_with("): applied")), "{composition}");
    assert_eq!(out.stdout.lines().last(), Some("ok"), "{}", out.stdout);
}

#[test]
fn sandbox_provider_config_is_validated_at_load() {
    let out = with_config(
        "plugins = [\"tools\", \"sandbox-local\"]\n[sandbox-local]\nrunnerFailureSignatures = [\"x\"]\n",
        &["prompt"],
    );
    assert_eq!(
        out.assert_usage_error(),
        "dsh-bash: sandbox-local: runnerFailureSignatures requires runnerCommand"
    );
}
