//! Nothing a confined command leaves behind runs later outside: each test plants code where
//! git, a shell or an agent would run it without the user naming it (a rebuilt or redirected
//! git directory, a linked worktree's or a submodule's config, `core.hooksPath`, the
//! pre-commit framework's config, a new repository's hooks, start-up files and agent
//! configs that did not exist), then runs the user's ordinary git or shell outside the
//! sandbox, as the cell's user, and checks that the planted code did not run, that the result
//! named the quarantined file, and that the file waits in the quarantine directory. Everyday
//! git work stays untouched.

use std::path::{Path, PathBuf};

use super::cell::{Mode, Outcome, World};
use super::matrix::{Skip, over_matrix};

/// The session every call of these tests runs in.
const SESSION: &str = "autorun";

/// A git of the user's, outside: no global or system config, an identity for commits.
const GIT_ENV: &str = "export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=t \
    GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e;";

/// The marker planted code would create, outside the workspace (where a confined command
/// cannot write, so only code run outside can create it).
fn marker(world: &World, name: &str) -> PathBuf {
    world.outside.join(format!("ran-{name}"))
}

/// A shell script that creates `marker` when run.
fn script(marker: &Path) -> String {
    format!("#!/bin/sh\\ntouch {}\\n", marker.display())
}

/// Writes an executable hook or script at `path` (shell text for a confined command).
fn plant(path: &str, marker: &Path) -> String {
    format!("mkdir -p \"$(dirname {path})\" && printf '{}' > {path} && chmod +x {path}", script(marker))
}

/// Sets up the user's repository outside: one commit.
fn user_repository(world: &World) {
    world.host_sh(&format!("{GIT_ENV} git init -q . && echo hi > a && git add a && git commit -qm init"));
}

/// The files under the session's quarantine directory, relative to it.
fn quarantined_files(world: &World) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&path, base, out);
            } else {
                out.push(path.strip_prefix(base).unwrap_or(&path).display().to_string());
            }
        }
    }
    let dir = world.dsh_home().join("quarantine").join(SESSION);
    let mut out = Vec::new();
    walk(&dir, &dir, &mut out);
    out
}

/// Runs `command` confined in the session under workspace-write.
fn confined(world: &World, command: &str) -> Outcome {
    let out = world.call(Mode::WorkspaceWrite, Some(SESSION), command);
    assert!(!out.runner_unavailable(), "{out:#?}");
    out
}

/// The user's ordinary `git add` and `git commit`, outside, where planted hooks would run.
fn commit_as_the_user(world: &World) {
    world.host_sh(&format!("{GIT_ENV} echo y > f && git add f && git commit -qm x || true"));
}

/// A repository with no `hooks` or `info` directory: no protected path pins its git directory
/// in the command's world, so the command may move it (else the move fails, `EBUSY`).
fn movable_repository(world: &World) {
    user_repository(world);
    world.host_sh("rm -rf .git/hooks .git/info");
}

/// The planted code did not run, and each of `paths` (relative to the workspace) was
/// reported quarantined and waits in the quarantine directory.
#[track_caller]
fn held(world: &World, out: &Outcome, marker: &Path, paths: &[&str]) {
    let mut problems = Vec::new();
    if marker.exists() {
        problems.push(format!("the planted code ran outside: {} exists", marker.display()));
    }
    let files = quarantined_files(world);
    for path in paths {
        let full = world.ws.join(path);
        if !out.text.contains(&format!("[sandbox: quarantined {}", full.display())) {
            problems.push(format!("the result does not report {path} quarantined"));
        }
        let name = Path::new(&world.ws.file_name().expect("name")).join(path);
        let name = name.to_string_lossy();
        if !files.iter().any(|f| f.ends_with(&*name) || f.contains(&format!("{name}/"))) {
            problems.push(format!("{path} is not in the quarantine directory ({files:?})"));
        }
    }
    assert!(problems.is_empty(), "{}\n{out:#?}", problems.join("; "));
}

fn rebuilt_git_dir(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    movable_repository(world);
    let m = marker(world, "rebuilt");
    let out = confined(
        world,
        &format!("mv .git .git-old && git init -q && {}", plant(".git/hooks/pre-commit", &m)),
    );
    out.ok();
    commit_as_the_user(world);
    // The rebuilt repository is quarantined and the user's is back under its name.
    held(world, &out, &m, &[".git"]);
    assert!(!world.ws.join(".git-old").exists(), "{out:#?}");
    assert_eq!(world.host_sh("git log --format=%s"), "x\ninit\n");
    Ok(())
}

#[test]
fn autorun_a_rebuilt_git_dir_is_quarantined_and_the_pinned_one_put_back() {
    over_matrix("autorun_a_rebuilt_git_dir_is_quarantined_and_the_pinned_one_put_back", rebuilt_git_dir);
}

fn gitdir_redirect(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    movable_repository(world);
    let m = marker(world, "gitdir");
    let out = confined(
        world,
        &format!(
            "mv .git .git-old && cp -r .git-old copy && {} && printf 'gitdir: copy\\n' > .git",
            plant("copy/hooks/pre-commit", &m)
        ),
    );
    out.ok();
    world.host_sh(&format!(
        "{GIT_ENV} git status >/dev/null; echo y > f && git add f && git commit -qm x || true"
    ));
    // The redirecting .git file is quarantined and the user's git directory is back.
    held(world, &out, &m, &[".git"]);
    assert!(world.ws.join(".git").is_dir() && !world.ws.join(".git-old").exists(), "{out:#?}");
    Ok(())
}

#[test]
fn autorun_a_gitdir_file_leading_to_a_planted_copy_is_quarantined() {
    over_matrix("autorun_a_gitdir_file_leading_to_a_planted_copy_is_quarantined", gitdir_redirect);
}

fn gitdir_redirect_without_the_original(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    movable_repository(world);
    let m = marker(world, "gitdir-deep");
    // The pinned git directory is moved out of the top level: the copy's hooks are judged.
    let out = confined(
        world,
        &format!(
            "mkdir -p deep && mv .git deep/kept && cp -r deep/kept copy && {} && printf 'gitdir: copy\\n' > .git",
            plant("copy/hooks/pre-commit", &m)
        ),
    );
    out.ok();
    commit_as_the_user(world);
    held(world, &out, &m, &["copy/hooks/pre-commit"]);
    Ok(())
}

#[test]
fn autorun_a_gitdir_file_leading_to_a_planted_copy_has_its_hooks_quarantined() {
    over_matrix(
        "autorun_a_gitdir_file_leading_to_a_planted_copy_has_its_hooks_quarantined",
        gitdir_redirect_without_the_original,
    );
}

fn commondir_redirect(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    user_repository(world);
    let m = marker(world, "commondir");
    let out = confined(
        world,
        &format!(
            "cp -r .git copy && {} && echo ../copy > .git/commondir",
            plant("copy/hooks/pre-commit", &m)
        ),
    );
    out.ok();
    commit_as_the_user(world);
    held(world, &out, &m, &["copy/hooks/pre-commit"]);
    Ok(())
}

#[test]
fn autorun_a_commondir_leading_to_a_planted_copy_has_its_hooks_quarantined() {
    over_matrix(
        "autorun_a_commondir_leading_to_a_planted_copy_has_its_hooks_quarantined",
        commondir_redirect,
    );
}

fn linked_worktree(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    user_repository(world);
    let m = marker(world, "worktree");
    // One linked worktree gets an fsmonitor in its own config; another's .git file is led to
    // a planted copy of the repository with a hook.
    let out = confined(
        world,
        &format!(
            "git worktree add -q wt && git worktree add -q -b other wt2 && {} && cp -r .git evil && {} \
             && printf 'gitdir: ../evil\\n' > wt2/.git; git config extensions.worktreeConfig true \
             && git -C wt config --worktree core.fsmonitor \"$PWD/fsmon\"; true",
            plant("fsmon", &m),
            plant("evil/hooks/pre-commit", &m)
        ),
    );
    out.ok();
    world.host_sh(&format!(
        "{GIT_ENV} (cd wt && git status >/dev/null); cd wt2 && echo y > f && git add f && git commit -qm x || true"
    ));
    held(world, &out, &m, &[".git/worktrees/wt/config.worktree", "evil/hooks/pre-commit"]);
    Ok(())
}

#[test]
fn autorun_a_linked_worktrees_config_and_redirected_git_file_are_quarantined() {
    over_matrix("autorun_a_linked_worktrees_config_and_redirected_git_file_are_quarantined", linked_worktree);
}

fn submodule(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    world.host_sh(&format!(
        "{GIT_ENV} git init -q . && git init -q sub && git -C sub commit -q --allow-empty -m s \
         && git -c protocol.file.allow=always submodule add -q ./sub sub && git commit -qm init"
    ));
    let m = marker(world, "submodule");
    let out = confined(
        world,
        &format!(
            "{} && git -C sub config core.fsmonitor \"$PWD/fsmon\" && {}",
            plant("fsmon", &m),
            plant("sub/.git/hooks/pre-commit", &m)
        ),
    );
    out.ok();
    world.host_sh(&format!(
        "{GIT_ENV} git status >/dev/null; cd sub && git status >/dev/null; git commit -q --allow-empty -m x || true"
    ));
    held(world, &out, &m, &["sub/.git/config", "sub/.git/hooks/pre-commit"]);
    Ok(())
}

#[test]
fn autorun_a_submodules_fsmonitor_and_hooks_are_quarantined() {
    over_matrix("autorun_a_submodules_fsmonitor_and_hooks_are_quarantined", submodule);
}

fn ssh_signing_key_command(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    user_repository(world);
    let m = marker(world, "ssh-key-command");
    // Signing with an ssh key and no key named: git asks gpg.ssh.defaultKeyCommand for one.
    let out = confined(
        world,
        &format!(
            "git config commit.gpgsign true && git config gpg.format ssh \
             && git config gpg.ssh.defaultKeyCommand 'touch {}'",
            m.display()
        ),
    );
    out.ok();
    commit_as_the_user(world);
    held(world, &out, &m, &[".git/config"]);
    assert_eq!(world.host_sh("git config gpg.format"), "ssh\n", "the data keys stay: {out:#?}");
    Ok(())
}

#[test]
fn autorun_an_ssh_signing_key_command_is_quarantined() {
    over_matrix("autorun_an_ssh_signing_key_command_is_quarantined", ssh_signing_key_command);
}

fn nested_repository(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    user_repository(world);
    let m = marker(world, "nested");
    // A repository in the work tree, added to the outer index as a gitlink (no .gitmodules):
    // the user's `git status` outside looks into it, and runs its fsmonitor.
    let out = confined(
        world,
        &format!(
            "mkdir sub && cd sub && git init -q && git -c user.email=a@b -c user.name=a commit -q \
             --allow-empty -m x && cd .. && git add sub && {} && git -C sub config core.fsmonitor \"$PWD/fsm.sh\"",
            plant("fsm.sh", &m)
        ),
    );
    out.ok();
    world.host_sh(&format!("{GIT_ENV} git status >/dev/null 2>&1; true"));
    held(world, &out, &m, &["sub/.git/config"]);
    assert!(world.ws.join("sub/.git/HEAD").is_file(), "the nested repository stays: {out:#?}");
    Ok(())
}

#[test]
fn autorun_a_nested_repositorys_fsmonitor_reached_through_the_index_is_quarantined() {
    over_matrix(
        "autorun_a_nested_repositorys_fsmonitor_reached_through_the_index_is_quarantined",
        nested_repository,
    );
}

fn hooks_path(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    user_repository(world);
    world.host_sh(&format!("{GIT_ENV} mkdir .husky && git config core.hooksPath .husky"));
    let m = marker(world, "husky");
    let out = confined(world, &plant(".husky/pre-commit", &m));
    out.ok();
    commit_as_the_user(world);
    held(world, &out, &m, &[".husky/pre-commit"]);
    // Pointing core.hooksPath somewhere new: the key and the hooks there go.
    let m = marker(world, "hookspath");
    let out =
        confined(world, &format!("{} && git config core.hooksPath hooks2", plant("hooks2/pre-commit", &m)));
    out.ok();
    world.host_sh(&format!("{GIT_ENV} echo z > g && git add g && git commit -qm y || true"));
    held(world, &out, &m, &[".git/config", "hooks2/pre-commit"]);
    assert_eq!(world.host_sh("git config core.hooksPath"), ".husky\n", "the user's own hooksPath stays");
    Ok(())
}

#[test]
fn autorun_hooks_under_core_hooks_path_are_quarantined() {
    over_matrix("autorun_hooks_under_core_hooks_path_are_quarantined", hooks_path);
}

fn pre_commit_framework(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    user_repository(world);
    // The framework's installed hook, reduced to what matters: it runs the config's entry.
    world.write(".pre-commit-config.yaml", "repos:\n- hooks:\n  - entry: true\n");
    world.host_sh(
        "printf '#!/bin/sh\\n# File generated by pre-commit: stand-in\\nsh -c \"$(sed -n \"s/^ *- entry: //p\" .pre-commit-config.yaml)\"\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    );
    let m = marker(world, "pre-commit");
    let out = confined(
        world,
        &format!(
            "printf 'repos:\\n- hooks:\\n  - entry: touch {}\\n' > .pre-commit-config.yaml",
            m.display()
        ),
    );
    out.ok();
    commit_as_the_user(world);
    held(world, &out, &m, &[".pre-commit-config.yaml"]);
    assert_eq!(
        std::fs::read_to_string(world.ws.join(".pre-commit-config.yaml")).expect("read"),
        "repos:\n- hooks:\n  - entry: true\n",
        "the pinned config is back"
    );
    Ok(())
}

#[test]
fn autorun_a_rewritten_pre_commit_config_is_quarantined() {
    over_matrix("autorun_a_rewritten_pre_commit_config_is_quarantined", pre_commit_framework);
}

fn new_repository(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    world.write("a", "hi\n");
    let m = marker(world, "init");
    let out = confined(world, &format!("git init -q && {}", plant(".git/hooks/pre-commit", &m)));
    out.ok();
    assert!(world.ws.join(".git/HEAD").is_file(), "the new repository stays");
    world.host_sh(&format!("{GIT_ENV} git add a && git commit -qm x || true"));
    held(world, &out, &m, &[".git/hooks/pre-commit"]);
    Ok(())
}

#[test]
fn autorun_a_new_repositorys_hooks_are_quarantined() {
    over_matrix("autorun_a_new_repositorys_hooks_are_quarantined", new_repository);
}

fn start_up_files(world: &World) -> Result<(), Skip> {
    let m = marker(world, "dotfiles");
    let line = format!("touch {}", m.display());
    let out = confined(
        world,
        &format!(
            "for f in .bashrc .profile .envrc; do echo '{line}' > $f; done; echo '{{\"mcpServers\":{{\"x\":{{\"command\":\"sh\"}}}}}}' > .mcp.json; mkdir -p .vscode && echo '{{}}' > .vscode/tasks.json"
        ),
    );
    out.ok();
    // The user's shells with HOME there, and direnv's `source .envrc`.
    let ws = world.ws.display().to_string();
    world.host_sh(&format!(
        "HOME={ws} bash -i -c true </dev/null >/dev/null 2>&1; HOME={ws} bash -l -c true >/dev/null 2>&1; [ -f .envrc ] && . ./.envrc; true"
    ));
    held(world, &out, &m, &[".bashrc", ".profile", ".envrc", ".mcp.json", ".vscode/tasks.json"]);
    for f in [".mcp.json", ".vscode/tasks.json"] {
        assert!(!world.ws.join(f).exists(), "{f} is still in the workspace");
    }
    // Only the user restores: a confined command can neither list nor move it back.
    let quarantine = world.dsh_home().join("quarantine").join(SESSION);
    let out = confined(
        world,
        &format!("ls -R {q} || true; mv {q} q2 || true; cp -r {q} q3 || true", q = quarantine.display()),
    );
    assert!(!out.stdout.contains(".bashrc"), "{out:#?}");
    assert!(!world.ws.join("q2").exists() && !world.ws.join("q3/x").exists(), "{out:#?}");
    assert_eq!(quarantined_files(world).len(), 5, "{:?}", quarantined_files(world));
    Ok(())
}

#[test]
fn autorun_new_start_up_files_and_agent_configs_are_quarantined() {
    over_matrix("autorun_new_start_up_files_and_agent_configs_are_quarantined", start_up_files);
}

fn everyday_git(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    user_repository(world);
    let out = confined(
        world,
        &format!(
            "{GIT_ENV} echo edit >> a && git add a && git commit -qm edit && echo wip >> a && git stash -q \
             && git stash pop -q && git branch topic && git worktree add -q wt topic \
             && git remote add origin https://example.com/r.git \
             && git branch -u \"$(git symbolic-ref --short HEAD)\" topic >/dev/null \
             && git -C wt log -1 --format=%s && git remote && cat a"
        ),
    );
    assert_eq!(out.ok(), "edit\norigin\nhi\nedit\nwip\n", "{out:#?}");
    assert!(!out.text.contains("quarantined"), "{out:#?}");
    assert!(quarantined_files(world).is_empty(), "{:?}", quarantined_files(world));
    assert_eq!(world.host_sh("git remote get-url origin"), "https://example.com/r.git\n");
    Ok(())
}

#[test]
fn autorun_everyday_git_quarantines_nothing() {
    over_matrix("autorun_everyday_git_quarantines_nothing", everyday_git);
}

/// Runs `lines` (`(tool, args)`) in the session through one `batch` under workspace-write;
/// returns each response's text.
fn batch_texts(world: &World, lines: &[(&str, serde_json::Value)]) -> Vec<String> {
    use std::io::Write;
    let mut input = String::new();
    for (id, (tool, args)) in lines.iter().enumerate() {
        let line =
            serde_json::json!({"tool": tool, "args": args, "session": SESSION, "cwd": world.ws, "id": id});
        input.push_str(&format!("{line}\n"));
    }
    let args: Vec<String> = vec!["--sandbox".into(), Mode::WorkspaceWrite.name().into(), "batch".into()];
    let mut child =
        world.dsh(&args).stdin(std::process::Stdio::piped()).spawn().expect("spawn dsh-bash batch");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write batch");
    let output = child.wait_with_output().expect("wait for dsh-bash batch");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let texts: Vec<String> = stdout
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON response line");
            value["content"][0]["text"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(texts.len(), lines.len(), "batch answered {stdout:?} ({:?})", output.status);
    texts
}

fn background_job(world: &World) -> Result<(), Skip> {
    let m = marker(world, "job");
    let texts = batch_texts(
        world,
        &[
            ("bash", serde_json::json!({"command": "true", "description": "d"})),
            (
                "bash",
                serde_json::json!({
                    "command": format!("sleep 0.2; echo 'touch {}' > .envrc", m.display()),
                    "description": "d",
                    "run_in_background": true,
                }),
            ),
            ("job_output", serde_json::json!({"job_id": "bash-1", "wait": true, "timeout_ms": 60000})),
        ],
    );
    world.host_sh("[ -f .envrc ] && . ./.envrc; true");
    let read = &texts[2];
    assert!(!m.exists(), "the job's .envrc ran outside: {texts:?}");
    let envrc = world.ws.join(".envrc");
    assert!(read.contains(&format!("[sandbox: quarantined {}", envrc.display())), "{texts:?}");
    assert!(quarantined_files(world).iter().any(|f| f.ends_with(".envrc")), "{:?}", quarantined_files(world));
    Ok(())
}

#[test]
fn autorun_a_background_jobs_plant_is_quarantined_when_it_ends_and_reported_when_read() {
    over_matrix(
        "autorun_a_background_jobs_plant_is_quarantined_when_it_ends_and_reported_when_read",
        background_job,
    );
}
