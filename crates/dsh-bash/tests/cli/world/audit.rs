//! The audit log: every approval, denial, refused destination and quarantine is appended to
//! `<DSH_HOME>/audit.jsonl` (or the file `DSH_AUDIT_LOG` names) as one JSON line with its time,
//! session, kind, what it was about and the verdict — never a command's output — and no
//! confined command can read it.

use std::path::Path;

use serde_json::{Value, json};

use super::cell::{Outcome, World};
use super::host::q;
use super::matrix::{Skip, over_matrix};

/// Every line of the audit log at `path`, parsed.
fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

/// `dsh-bash FLAGS call --json [--session S] bash ARGS`, with `env` added.
fn call(world: &World, flags: &[&str], session: Option<&str>, args: Value, env: &[(&str, &Path)]) -> Outcome {
    let mut argv: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
    argv.extend(["call".into(), "--json".into()]);
    if let Some(session) = session {
        argv.extend(["--session".into(), session.into(), "--cwd".into(), world.ws.display().to_string()]);
    }
    argv.extend(["bash".into(), args.to_string()]);
    let mut command = world.dsh(&argv);
    command.envs(env.iter().copied());
    Outcome::parse(&command.output().expect("spawn dsh-bash"))
}

fn request(command: &str) -> Value {
    json!({"command": command, "description": "d", "timeoutMs": 60000})
}

fn audited(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    let log = world.dsh_home().join("audit.jsonl");
    let ww = ["--sandbox", "workspace-write"];

    // A denied write, whose output is not recorded.
    let outside = world.outside.join("denied");
    let denied = format!("echo OUT$((40+2)); touch {}", q(outside.display()));
    let out = call(world, &ww, Some("s1"), request(&denied), &[]);
    assert!(out.stdout.contains("OUT42") && out.exit_code != Some(0), "{out:#?}");
    // An escalation approved, and one rejected.
    let escalate = |answer: &str, file: &str| {
        let mut args = request(&format!("touch {file}"));
        args["sandbox_permissions"] = json!("workspace-write");
        args["justification"] = json!("make the file");
        call(world, &["--sandbox", "read-only", "--approve", answer], Some("s2"), args, &[])
    };
    escalate("allowed-once", "approved").ok();
    let rejected = escalate("rejected", "refused");
    assert!(rejected.is_error, "{rejected:#?}");
    // A new auto-run file, quarantined.
    call(world, &ww, Some("s3"), request("echo 'echo hi' > .envrc"), &[]).ok();
    // A destination the network policy refuses.
    let refused =
        "python3 -c \"import urllib.request; urllib.request.urlopen('http://refused.example/', timeout=20)\"";
    let out = call(
        world,
        &["--sandbox", "workspace-write", "--network", "deny"],
        Some("s4"),
        request(refused),
        &[],
    );
    assert_ne!(out.exit_code, Some(0), "{out:#?}");

    let entries = lines(&log);
    let text = std::fs::read_to_string(&log).expect("read the audit log");
    assert!(!text.contains("OUT42"), "a command's output was recorded: {text}");
    let find = |kind: &str, session: &str| -> Vec<&Value> {
        entries.iter().filter(|e| e["kind"] == json!(kind) && e["session"] == json!(session)).collect()
    };
    for entry in &entries {
        let time = entry["time"].as_str().unwrap_or_default();
        assert!(time.len() == 24 && time.ends_with('Z'), "{entry}");
    }
    let denial = find("denial", "s1");
    assert_eq!(denial.len(), 1, "{text}");
    assert_eq!(denial[0]["what"]["command"], json!(denied), "{text}");
    assert_eq!(denial[0]["what"]["path"], json!(outside), "{text}");
    assert_eq!(denial[0]["what"]["access"], json!("write"), "{text}");
    assert_eq!(denial[0]["verdict"], json!("denied"), "{text}");
    let approvals = find("approval", "s2");
    let verdicts: Vec<(&Value, &Value, &Value)> =
        approvals.iter().map(|e| (&e["what"]["command"], &e["what"]["mode"], &e["verdict"])).collect();
    assert_eq!(
        verdicts,
        [
            (&json!("touch approved"), &json!("workspace-write"), &json!("allowed-once")),
            (&json!("touch refused"), &json!("workspace-write"), &json!("rejected")),
        ],
        "{text}"
    );
    let quarantine = find("quarantine", "s3");
    assert_eq!(quarantine.len(), 1, "{text}");
    assert_eq!(
        quarantine[0]["what"]["path"],
        json!(world.ws.canonicalize().expect("ws").join(".envrc")),
        "{text}"
    );
    assert_eq!(quarantine[0]["verdict"], json!("quarantined"), "{text}");
    let network = find("network", "s4");
    assert!(
        network
            .iter()
            .any(|e| e["what"]["host"] == json!("refused.example:80") && e["verdict"] == json!("denied")),
        "{text}"
    );

    // No confined command reads it.
    let read = call(world, &ww, None, request(&format!("cat {}", q(log.display()))), &[]);
    assert!(read.exit_code != Some(0) && !read.stdout.contains("\"kind\""), "{read:#?}");

    // DSH_AUDIT_LOG names another file.
    let elsewhere = world.outside.join("audit/elsewhere.jsonl");
    let before = lines(&log).len();
    let out = call(world, &ww, Some("s5"), request(&denied), &[("DSH_AUDIT_LOG", &elsewhere)]);
    assert_ne!(out.exit_code, Some(0), "{out:#?}");
    let moved = lines(&elsewhere);
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(moved[0]["kind"], json!("denial"));
    assert_eq!(lines(&log).len(), before, "the default log was written too");
    Ok(())
}

#[test]
fn audit_log_records_approvals_denials_refused_hosts_and_quarantines() {
    over_matrix("audit_log_records_approvals_denials_refused_hosts_and_quarantines", audited);
}

#[test]
fn audit_log_is_not_kept_when_turned_off() {
    over_matrix("audit_log_is_not_kept_when_turned_off", |world| {
        let off = Path::new("off");
        let out = call(
            world,
            &["--sandbox", "workspace-write"],
            None,
            request("touch /etc/audited"),
            &[("DSH_AUDIT_LOG", off)],
        );
        assert_ne!(out.exit_code, Some(0), "{out:#?}");
        assert!(!world.dsh_home().join("audit.jsonl").exists());
        assert!(!world.ws.join("off").exists());
        Ok(())
    });
}
