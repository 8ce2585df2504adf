//! The escalation hint after a sandbox denial is shown only when an approval answer can come:
//! with an `--approve` answer; not without one (whether or not the approval service is
//! composed), and not under the `never` policy. These confine real commands: on a host
//! without a usable sandbox backend they skip, saying so.

use serde_json::{Value, json};

use crate::harness::{Run, Sandbox};

const DENIAL: &str = "[sandbox: file access denied under read-only mode]";
const HINT: &str = "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]";

fn confining_host() -> Option<Sandbox> {
    crate::harness::confining_host().then(Sandbox::new)
}

/// A batch in session `s1`: a denied foreground write, a denied background write, and
/// `job_output` waiting for the background job. Returns the three result texts.
fn denied_batch(sandbox: &Sandbox, switches: &[&str]) -> [String; 3] {
    let dir = sandbox.path().to_str().expect("utf-8");
    let touch = |file: &str, background: bool| {
        let mut args = json!({"command": format!("touch {file}"), "description": "Create a file"});
        if background {
            args["run_in_background"] = json!(true);
        }
        args
    };
    let input = [
        json!({"tool": "bash", "args": touch("fg-file", false), "session": "s1", "cwd": dir, "id": 1}),
        json!({"tool": "bash", "args": touch("bg-file", true), "session": "s1", "id": 2}),
        json!({"tool": "job_output", "args": {"job_id": "bash-1", "wait": true}, "session": "s1", "id": 3}),
    ]
    .iter()
    .map(|line| format!("{line}\n"))
    .collect::<String>();
    let mut args = vec!["--sandbox", "read-only"];
    args.extend(switches);
    args.push("batch");
    let out = sandbox.run(&args, &input);
    assert_eq!(out.code, Some(0), "{switches:?}: {out:?}");
    let lines = out.json_lines();
    assert_eq!(lines.len(), 3, "{switches:?}: {}", out.stdout);
    let texts: Vec<String> = lines.iter().map(|l| text_of(l, switches)).collect();
    assert_eq!(texts[1], "started background job bash-1", "{switches:?}");
    assert!(!sandbox.path().join("fg-file").exists() && !sandbox.path().join("bg-file").exists());
    [texts[0].clone(), texts[1].clone(), texts[2].clone()]
}

fn text_of(line: &Value, switches: &[&str]) -> String {
    assert_eq!(line["isError"], json!(false), "{switches:?}: {line}");
    line["content"][0]["text"].as_str().expect("text").to_owned()
}

/// Asserts the denial marker, and the hint right after it exactly when `hint`.
fn assert_denied(text: &str, hint: bool, what: &str) {
    assert!(text.contains(DENIAL), "{what}: {text}");
    if hint {
        assert!(text.contains(&format!("{DENIAL}\n{HINT}\n")), "{what}: the hint follows the denial: {text}");
    } else {
        assert!(!text.contains("escalation available"), "{what}: no hint expected: {text}");
        assert!(!text.contains("sandbox_permissions"), "{what}: no hint expected: {text}");
    }
}

fn assert_batch(sandbox: &Sandbox, switches: &[&str], hint: bool) {
    let [foreground, _, job_output] = denied_batch(sandbox, switches);
    assert!(foreground.ends_with("\n[exit code: 1]"), "{switches:?}: {foreground}");
    assert_denied(&foreground, hint, &format!("{switches:?} foreground"));
    assert!(job_output.ends_with("\n[status: completed, exit code: 1]"), "{switches:?}: {job_output}");
    assert_denied(&job_output, hint, &format!("{switches:?} job_output"));
}

#[test]
fn batch_without_an_approve_answer_shows_no_hint() {
    let Some(sandbox) = confining_host() else { return };
    assert_batch(&sandbox, &[], false);
    // The same with the approval service composed but nothing to answer it.
    let again = Sandbox::new();
    assert_batch(&again, &["--approval-policy", "ask"], false);
}

#[test]
fn batch_with_an_approve_answer_shows_the_hint() {
    let Some(sandbox) = confining_host() else { return };
    assert_batch(&sandbox, &["--approve", "allowed-once"], true);
}

#[test]
fn batch_under_the_never_policy_shows_no_hint() {
    let Some(sandbox) = confining_host() else { return };
    assert_batch(&sandbox, &["--approval-policy", "never"], false);
    let again = Sandbox::new();
    assert_batch(&again, &["--approve", "allowed-once", "--approval-policy", "never"], false);
}

fn call(sandbox: &Sandbox, switches: &[&str]) -> Run {
    let dir = sandbox.path().to_str().expect("utf-8");
    let args = json!({"command": "touch made-here", "description": "Create a file"}).to_string();
    let mut full = vec!["--sandbox", "read-only"];
    full.extend(switches);
    full.extend(["call", "--session", "s1", "--cwd", dir, "bash", &args]);
    sandbox.run(&full, "")
}

#[test]
fn call_shows_the_hint_only_with_an_approve_answer() {
    let Some(sandbox) = confining_host() else { return };
    for switches in [&[][..], &["--approval-policy", "ask"][..]] {
        let out = call(&sandbox, switches);
        assert_eq!(out.code, Some(0), "{switches:?}: {out:?}");
        assert!(out.stdout.ends_with(&format!("{DENIAL}\n[exit code: 1]")), "{switches:?}: {}", out.stdout);
        assert_denied(&out.stdout, false, &format!("call {switches:?}"));
    }
    // Without a session too (the first call a person tries).
    let args = json!({"command": "touch made-here", "description": "Create a file"}).to_string();
    let out = sandbox.run(&["--sandbox", "read-only", "call", "bash", &args], "");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.ends_with(&format!("{DENIAL}\n[exit code: 1]")), "{}", out.stdout);
    let out = call(&sandbox, &["--approve", "allowed-once"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.ends_with(&format!("{DENIAL}\n{HINT}\n[exit code: 1]")), "{}", out.stdout);
}
