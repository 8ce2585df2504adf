//! `doctor` ends with one verdict line (`ok`, `degraded: …`, `unusable: …`) and exits with a
//! status that says the same (0, 3, 1); it never lists a root a confined command may not
//! write, and a check that does not answer is reported, not waited for.

use std::os::unix::fs::PermissionsExt as _;

use super::harness::{Run, Sandbox, confining_host, output};

/// The last line of `doctor`'s report.
fn verdict(out: &Run) -> &str {
    out.stdout.lines().last().unwrap_or_else(|| panic!("a report: {out:?}"))
}

#[test]
fn doctor_on_a_confining_host_says_ok_and_exits_0() {
    if !confining_host() {
        return;
    }
    let sandbox = Sandbox::outside_tmp();
    for global in [&[][..], &["--sandbox", "workspace-write"][..]] {
        let out = sandbox.run(&[global, &["doctor"]].concat(), "");
        assert_eq!((verdict(&out), out.code), ("ok", Some(0)), "{global:?}: {out:?}");
    }
}

#[test]
fn a_pending_plugin_makes_the_verdict_unusable_and_the_exit_status_1() {
    let sandbox = Sandbox::new();
    // tool-bash without the shell it needs stays pending.
    let config = sandbox.write("pending.toml", "plugins = [\"tools\", \"tool-bash\"]\n");
    let out = sandbox.run(&["--config", config.to_str().expect("utf-8"), "doctor"], "");
    assert_eq!(out.code, Some(1), "{out:?}");
    let line = verdict(&out);
    assert!(line.starts_with("unusable: ") && line.contains("plugin tool-bash is pending"), "{line}");
}

#[test]
fn a_partly_confining_runner_makes_the_verdict_degraded_and_the_exit_status_3() {
    if !confining_host() {
        return;
    }
    let sandbox = Sandbox::outside_tmp();
    let config = sandbox.write("bwrap.toml", "[sandbox-local]\nrunners = [\"bwrap\"]\n");
    let out = sandbox
        .run(&["--config", config.to_str().expect("utf-8"), "--sandbox", "workspace-write", "doctor"], "");
    assert!(
        out.stdout.contains("selected runner: bwrap (enforcement partial)"),
        "bubblewrap confines partly here: {out:?}"
    );
    assert_eq!(out.code, Some(3), "{out:?}");
    assert_eq!(verdict(&out), "degraded: the selected sandbox runner bwrap confines only partly");
    // A composition that does not confine gets all it asks for.
    let out = sandbox
        .run(&["--config", config.to_str().expect("utf-8"), "--sandbox", "danger-full-access", "doctor"], "");
    assert_eq!((verdict(&out), out.code), ("ok", Some(0)), "{out:?}");
}

/// Started from `/`, the workspace root is `/`, which the in-process runner keeps read-only:
/// `doctor` does not list it as writable, and says why the verdict is degraded; a confined
/// write there is indeed refused.
#[test]
fn doctor_started_from_the_root_does_not_list_it_as_writable() {
    if !confining_host() {
        return;
    }
    let sandbox = Sandbox::outside_tmp();
    let mut doctor = sandbox.command(&["--sandbox", "workspace-write", "doctor"]);
    doctor.current_dir("/");
    let out = output(doctor, b"");
    assert!(out.stdout.contains("selected runner: landlock"), "{out:?}");
    let tmp = std::fs::canonicalize("/tmp").expect("/tmp");
    let line =
        out.stdout.lines().find(|l| l.starts_with("  workspace-write: ")).expect("the workspace-write line");
    assert_eq!(line, format!("  workspace-write: {}", tmp.display()), "{}", out.stdout);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(verdict(&out).starts_with("degraded: the workspace root is / "), "{out:?}");

    let target = format!("/dsh-doctor-root-{}", std::process::id());
    let args = serde_json::json!({"command": format!("touch {target}"), "description": "d"}).to_string();
    let mut call = sandbox.command(&["--sandbox", "workspace-write", "call", "bash", &args]);
    call.current_dir("/");
    let out = output(call, b"");
    let written = std::path::Path::new(&target).exists();
    let _ = std::fs::remove_file(&target);
    assert!(!written, "a confined command wrote / : {out:?}");
    assert!(out.stdout.contains(&format!("[sandbox: write to {target} refused]")), "{out:?}");
}

/// A `bash` that does not answer `--version` is reported after the check's bound, and the
/// verdict is `unusable`: doctor does not wait for it.
#[test]
fn a_check_that_hangs_is_reported_not_waited_for() {
    let sandbox = Sandbox::new();
    let bin = sandbox.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let fake = bin.join("bash");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 20\n").expect("fake bash");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut doctor = sandbox.command(&["doctor"]);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    doctor.env("PATH", path);
    let out = output(doctor, b"");
    assert!(out.stdout.lines().any(|l| l == "bash: did not answer within 2 s"), "{out:?}");
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(verdict(&out).starts_with("unusable: bash did not answer"), "{out:?}");
}
