//! The command's files: a `/tmp` private to its session, files in the workspace that other
//! programs run or trust stay out of its reach, and it knows the mode it runs under.

use std::path::PathBuf;

use super::cell::{Mode, World};
use super::host::{self, Removed, q, verdicts};
use super::matrix::{Skip, over_matrix};

fn attack_private_tmp(world: &World) -> Result<(), Skip> {
    let name = host::unique("dsh-world-tmp");
    let host_file = Removed(PathBuf::from("/tmp").join(&name));
    let file = q(format!("/tmp/{name}"));
    // Within one dsh-bash process first, then across processes sharing DSH_HOME.
    let answers = world.batch(&[
        ("s1", &format!("echo one > {file}")),
        ("s1", &format!("cat {file}")),
        ("s2", &format!("[ -e {file} ] && echo visible || echo absent")),
    ]);
    answers[0].ok();
    assert_eq!(
        answers[1].ok(),
        "one\n",
        "in one batch, a later call of the session must see its /tmp: {answers:#?}"
    );
    assert_eq!(
        answers[2].ok(),
        "absent\n",
        "in one batch, another session must not see its /tmp: {answers:#?}"
    );
    assert!(!host_file.0.exists(), "the command's /tmp file appeared in the host's /tmp");
    let name = host::unique("dsh-world-tmp");
    let host_file = Removed(PathBuf::from("/tmp").join(&name));
    let file = q(format!("/tmp/{name}"));
    let first = world.call(
        Mode::WorkspaceWrite,
        Some("s1"),
        &format!(
            "echo one > {file} && printf 'TMPDIR=%s\\n' \"${{TMPDIR-}}\" && t=$(mktemp) && echo x > \"$t\" && echo \"mktemp: $t\""
        ),
    );
    let report = first.ok();
    let tmpdir = report.lines().find_map(|l| l.strip_prefix("TMPDIR=")).unwrap_or_default();
    assert!(!tmpdir.is_empty(), "TMPDIR is not set: {first:#?}");
    assert!(report.contains("mktemp: "), "TMPDIR is not writable: {first:#?}");
    assert!(!host_file.0.exists(), "the command's /tmp file appeared in the host's /tmp: {first:#?}");
    let second = world.call(Mode::WorkspaceWrite, Some("s1"), &format!("cat {file}"));
    assert_eq!(
        second.ok(),
        "one\n",
        "a later `call` of the session (same DSH_HOME, another dsh-bash process) must see its /tmp: {second:#?}"
    );
    let other = world.call(
        Mode::WorkspaceWrite,
        Some("s2"),
        &format!("[ -e {file} ] && echo visible || echo absent"),
    );
    assert_eq!(
        other.ok(),
        "absent\n",
        "another session's `call` must not see the first one's /tmp: {other:#?}"
    );
    assert!(!host_file.0.exists(), "the command's /tmp file appeared in the host's /tmp");
    Ok(())
}

#[test]
fn world_has_a_tmp_private_to_its_session() {
    over_matrix("world_has_a_tmp_private_to_its_session", attack_private_tmp);
}

/// Files other programs run or trust, with the content the test gives them.
const TRUSTED: [(&str, &str); 5] = [
    (".envrc", "export A=1\n"),
    (".bashrc", "# rc\n"),
    (".mcp.json", "{}\n"),
    (".vscode/tasks.json", "{\"version\": \"2.0.0\"}\n"),
    (".claude/commands/x.md", "# x\n"),
];

/// Each attempt is `name` and a bash command that succeeds only if the write happened.
const ATTEMPTS: [(&str, &str); 9] = [
    (
        "hook",
        "printf '#!/bin/sh\\ntouch OUTSIDE\\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout",
    ),
    ("fsmonitor", "git config core.fsmonitor \"touch OUTSIDE\""),
    ("envrc", "echo evil >> .envrc"),
    ("bashrc", "echo evil >> .bashrc"),
    ("bashrc-replaced", "rm -f .bashrc && echo evil > .bashrc"),
    ("mcp", "echo evil > .mcp.json"),
    ("vscode", "echo evil > .vscode/tasks.json"),
    ("vscode-replaced", "mv .vscode .vscode-old && mkdir .vscode && echo evil > .vscode/tasks.json"),
    ("claude", "echo evil > .claude/commands/x.md"),
];

fn attack_protected_paths(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    for (path, text) in TRUSTED {
        world.write(path, text);
    }
    world.host_sh(
        "git init -q . && echo hi > a && git add -A && git -c user.name=t -c user.email=t@e commit -qm init",
    );
    let git_config = std::fs::read(world.ws.join(".git/config")).expect("read .git/config");
    let mut script = String::new();
    for (name, attempt) in ATTEMPTS {
        script.push_str(&format!(
            "if ( {attempt} ) >/dev/null 2>&1; then echo '{name}: CHANGED'; else echo '{name}: refused'; fi\n"
        ));
    }
    script.push_str(
        "echo new > b && git add b && git -c user.name=t -c user.email=t@e commit -qm x && echo 'commit: ok'",
    );
    let out = world.bash(&script);
    // The git config is not read-only (git rewrites it for everyday work): the fsmonitor is
    // set during the call, then quarantined when the call ends.
    let verdict = |name: &str| if name == "fsmonitor" { "CHANGED" } else { "refused" };
    let mut expected: Vec<(String, String)> =
        ATTEMPTS.iter().map(|(name, _)| ((*name).to_owned(), verdict(name).to_owned())).collect();
    expected.push(("commit".into(), "ok".into()));
    let mut problems = Vec::new();
    let report = verdicts(&out.stdout);
    if report != expected {
        problems.push(format!("attempts: {report:?}"));
    }
    for (path, text) in TRUSTED {
        let now = std::fs::read_to_string(world.ws.join(path)).unwrap_or_else(|e| format!("({e})"));
        if now != text {
            problems.push(format!("{path} is now {now:?}"));
        }
    }
    let config_now = std::fs::read_to_string(world.ws.join(".git/config")).unwrap_or_default();
    if config_now.contains("fsmonitor") || !config_now.starts_with(&*String::from_utf8_lossy(&git_config)) {
        problems.push(format!(".git/config is now {config_now:?}"));
    }
    if !out.text.contains("[sandbox: quarantined") {
        problems.push("the result does not report the quarantined .git/config".into());
    }
    if world.ws.join(".git/hooks/post-checkout").exists() {
        problems.push(".git/hooks/post-checkout was written".into());
    }
    assert!(problems.is_empty(), "{}\n{out:#?}", problems.join("; "));
    out.ok();
    assert_eq!(world.host_sh("git log -1 --format=%s && git show --name-only --format= HEAD"), "x\nb\n");
    Ok(())
}

#[test]
fn world_cannot_change_files_other_programs_trust_but_git_commit_works() {
    over_matrix(
        "world_cannot_change_files_other_programs_trust_but_git_commit_works",
        attack_protected_paths,
    );
}

fn attack_mode_variable(world: &World) -> Result<(), Skip> {
    for mode in [Mode::WorkspaceWrite, Mode::ReadOnly] {
        let out = world.call(mode, None, "printf '%s' \"${DSH_SANDBOX-unset}\"");
        assert_eq!(out.ok(), mode.name(), "DSH_SANDBOX under {}: {out:#?}", mode.name());
    }
    Ok(())
}

#[test]
fn world_names_its_mode_in_dsh_sandbox() {
    over_matrix("world_names_its_mode_in_dsh_sandbox", attack_mode_variable);
}
