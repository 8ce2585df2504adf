//! `--sandbox`, `--approve` and `--approval-policy` end to end. These confine real commands:
//! on a host without a usable sandbox backend they skip, saying so.

use serde_json::json;

use crate::harness::{Run, Sandbox};

/// No escalation hint: without `--approve` no approval answer can come (see `escalation_hint`).
const DENIAL: &str = "[sandbox: file access denied under read-only mode]\n[exit code: 1]";

/// A scratch sandbox when this host can confine commands (see
/// [`crate::harness::confining_host`]), `None` after printing why it cannot.
fn confining_host() -> Option<Sandbox> {
    crate::harness::confining_host().then(Sandbox::new)
}

fn touch(sandbox: &Sandbox, switches: &[&str], escalate: bool) -> Run {
    let dir = sandbox.path().to_str().expect("utf-8");
    let mut args = json!({"command": "touch made-here", "description": "Create a file"});
    if escalate {
        args["sandbox_permissions"] = json!("workspace-write");
        args["justification"] = json!("The test needs to create a file in its workspace.");
    }
    let args = args.to_string();
    let mut full: Vec<&str> = switches.to_vec();
    full.extend(["call", "--session", "s1", "--cwd", dir, "bash", &args]);
    sandbox.run(&full, "")
}

#[test]
fn read_only_denies_writes_as_a_result_not_an_error() {
    let Some(sandbox) = confining_host() else { return };
    let out = touch(&sandbox, &["--sandbox", "read-only"], false);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("[stderr]\ntouch: cannot touch 'made-here': "), "{}", out.stdout);
    assert!(out.stdout.ends_with(DENIAL), "{}", out.stdout);
    assert!(!sandbox.path().join("made-here").exists());
}

#[test]
fn escalation_without_approval_service_is_refused() {
    let Some(sandbox) = confining_host() else { return };
    let out = touch(&sandbox, &["--sandbox", "read-only"], true);
    assert_eq!(
        out.stdout,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed"
    );
    assert_eq!(out.code, Some(1));
    assert!(!sandbox.path().join("made-here").exists());
}

#[test]
fn approve_answers_escalations() {
    let Some(sandbox) = confining_host() else { return };
    let cases = [
        (
            vec!["--approve", "rejected"],
            "Error: the user rejected escalating this command to \"workspace-write\"",
        ),
        (
            vec!["--approve", "cancelled"],
            "Error: approval for escalating to \"workspace-write\" was cancelled",
        ),
        (
            vec!["--approve", "unavailable"],
            "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available",
        ),
        (
            vec!["--approve", "allowed-once", "--approval-policy", "never"],
            "Error: the user rejected escalating this command to \"workspace-write\"",
        ),
    ];
    for (switches, expected) in cases {
        let mut all = vec!["--sandbox", "read-only"];
        all.extend(&switches);
        let out = touch(&sandbox, &all, true);
        assert_eq!(out.stdout, expected, "{switches:?}");
        assert_eq!(out.code, Some(1), "{switches:?}");
        assert!(!sandbox.path().join("made-here").exists(), "{switches:?}");
    }
    let out = touch(&sandbox, &["--sandbox", "read-only", "--approve", "allowed-once"], true);
    assert_eq!(out.stdout, "(no output)", "{out:?}");
    assert_eq!(out.code, Some(0));
    assert!(sandbox.path().join("made-here").exists());
    let log = std::fs::read_to_string(sandbox.path().join("home/sessions/s1.jsonl")).expect("session log");
    let decided: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|e| e["type"] == "approval/decided")
        .map(|e| e["data"]["outcome"].clone())
        .collect();
    assert_eq!(
        decided,
        [
            json!("rejected"),
            json!("cancelled"),
            json!("unavailable"),
            json!("rejected"),
            json!("allowed-once")
        ]
    );
}

#[test]
fn workspace_write_with_a_workspace_root_writes_there_only() {
    let Some(sandbox) = confining_host() else { return };
    // Outside /tmp and the OS temp dir, which workspace-write leaves writable.
    let scratch = crate::harness::scratch_outside_tmp();
    let root = scratch.path().join("root");
    std::fs::create_dir(&root).expect("mkdir");
    let out = sandbox.run(
        &[
            "--sandbox",
            "workspace-write",
            "--workspace-root",
            root.to_str().expect("utf-8"),
            "call",
            "bash",
            r#"{"command":"touch inside && touch ../outside","description":"d"}"#,
        ],
        "",
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("[sandbox: file access denied under workspace-write mode]"),
        "{}",
        out.stdout
    );
    assert!(root.join("inside").exists());
    assert!(!scratch.path().join("outside").exists());
}

#[test]
fn sandboxed_schema_advertises_escalation() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["--sandbox", "read-only", "schema"], "");
    assert_eq!(out.code, Some(0), "{out:?}");
    let schemas: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let bash = schemas.as_array().expect("array").iter().find(|s| s["name"] == "bash").expect("bash");
    let keys: Vec<&str> =
        bash["inputSchema"]["properties"].as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
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
}

#[test]
fn local_executor_settings_carry_over_to_the_sandboxing_executor() {
    let sandbox = Sandbox::new();
    let config = sandbox.write("dsh.toml", "[bash-local]\ngraceMs = 0\n");
    let out =
        sandbox.run(&["--config", config.to_str().expect("utf-8"), "--sandbox", "read-only", "schema"], "");
    assert_eq!(out.assert_usage_error(), "dsh-bash: bash-local: graceMs must be a positive finite number");
}

/// A `call` that spills nothing leaves no spill directory behind, confined or not (a confined
/// one makes its session's directory ahead of time, to show it to the command); one that
/// spilled keeps its directory, with the file its result names.
#[test]
fn a_call_leaves_a_spill_directory_only_when_it_spilled() {
    let tmp = crate::harness::scratch_outside_tmp();
    let spill_dirs = || -> Vec<String> {
        std::fs::read_dir(tmp.path())
            .expect("list the temporary directory")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with("dsh-subprocess-"))
            .collect()
    };
    for mode in crate::harness::modes() {
        let sandbox = Sandbox::outside_tmp();
        for _ in 0..3 {
            let mut args = mode.clone();
            args.extend(["call", "bash", r#"{"command":"echo hi","description":"d"}"#]);
            let out = crate::harness::output(
                {
                    let mut c = sandbox.command(&args);
                    c.env("TMPDIR", tmp.path());
                    c
                },
                b"",
            );
            assert_eq!(out.stdout, "hi\n", "{mode:?}: {out:?}");
        }
        assert_eq!(
            spill_dirs(),
            Vec::<String>::new(),
            "{mode:?}: calls that spilled nothing left directories"
        );
        let mut args = mode.clone();
        args.extend(["call", "bash", r#"{"command":"seq 1 300000","description":"d"}"#]);
        let out = crate::harness::output(
            {
                let mut c = sandbox.command(&args);
                c.env("TMPDIR", tmp.path());
                c
            },
            b"",
        );
        let tail = &out.stdout[out.stdout.len().saturating_sub(300)..];
        let kept = spill_dirs();
        assert_eq!(kept.len(), 1, "{mode:?}: the spilling call's directory is kept: {tail:?}");
        let path = tail.split("full output: ").nth(1).and_then(|r| r.split(']').next());
        let path = path.unwrap_or_else(|| panic!("{mode:?}: no spill path in {tail:?}"));
        assert!(std::path::Path::new(path).is_file(), "{mode:?}: {path} is gone");
        std::fs::remove_dir_all(tmp.path().join(&kept[0])).expect("clean up");
    }
}
