//! A linked git worktree works under workspace-write: `git add` and `git commit` from it write
//! what git needs in the main repository (the worktree's own git directory, the objects, the
//! refs and their logs), while the main repository's hooks and config, and the pointer files
//! that lead git to them, stay out of the command's reach. A `.git` file a command writes,
//! naming another repository's worktree, opens nothing of that repository.

use super::cell::World;
use super::host::q;
use super::matrix::{Skip, over_matrix};

const HOOK: &str = "#!/bin/sh\nexit 0\n";

fn commit_from_a_linked_worktree(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    let main = world.outside.join("main");
    let ws = world.ws.display().to_string();
    world.host_sh(&format!(
        "git init -q {main} && cd {main} && echo a > a && git add a && git -c user.name=t -c user.email=t@e commit -qm first \
         && printf '{hook}' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && git worktree add -q {ws} -b linked",
        main = q(main.display()),
        ws = q(&ws),
        hook = HOOK.replace('\n', "\\n"),
    ));
    let git = main.join(".git");
    let admin = git.join("worktrees").join(world.ws.file_name().expect("the workspace has a name"));
    let config = std::fs::read(git.join("config")).expect("read the main config");
    let commondir = std::fs::read(admin.join("commondir")).expect("read commondir");

    let out = world.bash(
        "echo b > b && git add b && git -c user.name=t -c user.email=t@e commit -qm second && git log --format=%s",
    );
    assert_eq!(out.ok(), "second\nfirst\n", "{out:#?}");
    let log = world.host_sh(&format!("git -C {} log --format=%s linked", q(main.display())));
    assert_eq!(log, "second\nfirst\n", "the commit is in the main repository");

    // Its hooks and config, and the worktree's pointers to them, stay out of reach.
    let out = world.bash(&format!(
        "echo 'exit 1' >> {hook} || echo hook refused; touch {new_hook} || echo new hook refused; \
         echo '[core]' >> {config} || echo config refused; echo /elsewhere > {commondir} || echo commondir refused",
        hook = q(git.join("hooks/pre-commit").display()),
        new_hook = q(git.join("hooks/post-commit").display()),
        config = q(git.join("config").display()),
        commondir = q(admin.join("commondir").display()),
    ));
    assert_eq!(out.stdout, "hook refused\nnew hook refused\nconfig refused\ncommondir refused\n", "{out:#?}");
    assert_eq!(std::fs::read_to_string(git.join("hooks/pre-commit")).expect("read the hook"), HOOK);
    assert!(!git.join("hooks/post-commit").exists());
    assert_eq!(std::fs::read(git.join("config")).expect("read the main config"), config);
    assert_eq!(std::fs::read(admin.join("commondir")).expect("read commondir"), commondir);
    Ok(())
}

#[test]
fn worktrees_git_commit_from_a_linked_worktree() {
    over_matrix("worktrees_git_commit_from_a_linked_worktree", commit_from_a_linked_worktree);
}

fn forged_dot_git_opens_nothing(world: &World) -> Result<(), Skip> {
    world.require("git")?;
    // Another repository of the user's, with a linked worktree elsewhere.
    let other = world.outside.join("other");
    let tree = world.outside.join("other-tree");
    world.host_sh(&format!(
        "git init -q {other} && cd {other} && echo a > a && git add a && git -c user.name=t -c user.email=t@e commit -qm first \
         && git worktree add -q {tree} -b linked",
        other = q(other.display()),
        tree = q(tree.display()),
    ));
    let admin = other.join(".git/worktrees/other-tree");
    // A command names that worktree's git directory from the workspace; the next command
    // still cannot write that repository.
    let forge = format!("printf 'gitdir: %s\\n' {} > .git", q(admin.display()));
    world.bash(&forge).ok();
    let refs = other.join(".git/refs/heads/planted");
    let objects = other.join(".git/objects/planted");
    let out = world.bash(&format!(
        "echo x > {} || echo refs refused; echo x > {} || echo objects refused",
        q(refs.display()),
        q(objects.display())
    ));
    assert_eq!(out.stdout, "refs refused\nobjects refused\n", "{out:#?}");
    assert!(!refs.exists() && !objects.exists());
    Ok(())
}

#[test]
fn worktrees_a_forged_dot_git_file_opens_no_other_repository() {
    over_matrix("worktrees_a_forged_dot_git_file_opens_no_other_repository", forged_dot_git_opens_nothing);
}
