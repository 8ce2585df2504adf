//! The harness user's secrets and the roots a command may write: credentials under `$HOME`
//! (and the harness's session logs, and whatever `--deny-read` / `denyRead` add) cannot be
//! read by a confined command, by any program or child — the read is refused, not answered
//! with nothing — while the rest of `$HOME` stays readable; `--add-dir` opens one more
//! directory to workspace-write and nothing beside it, and a refused write names its path.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::cell::{Mode, Outcome, World};
use super::host::q;
use super::matrix::{Skip, over_matrix};

const SECRET: &str = "SECRET-ed25519-7f3a9c";

/// The directory above the world's workspace (it holds the workspace, `outside` and the
/// world's `DSH_HOME`, `home`).
fn base(world: &World) -> PathBuf {
    world.ws.parent().expect("the workspace has a parent").to_path_buf()
}

/// A `$HOME` for `dsh-bash`, outside `/tmp`, owned by the cell's user: secrets under the
/// default list, one for `--deny-read`, one for `denyRead`, and an ordinary file.
fn fake_home(world: &World) -> PathBuf {
    let home = base(world).join("user-home");
    for (rel, text) in [
        (".ssh/id_ed25519", SECRET),
        (".aws/credentials", SECRET),
        (".netrc", SECRET),
        (".vault/key", SECRET),
        (".from-config", SECRET),
        ("notes.txt", "notes\n"),
    ] {
        let path = home.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir -p");
        std::fs::write(&path, text).expect("write");
    }
    std::fs::create_dir_all(home.join(".npm")).expect("mkdir .npm");
    world.give(&home);
    home
}

/// `dsh-bash [FLAGS] call --json bash COMMAND` under `mode`, with `HOME` set to `home`.
fn call(
    world: &World,
    home: &Path,
    flags: &[String],
    mode: Mode,
    session: Option<&str>,
    command: &str,
) -> Outcome {
    let mut args = flags.to_vec();
    args.extend(world.call_args(mode, session, command));
    let output = world.dsh_with_home(&args, Some(home)).output().expect("spawn dsh-bash");
    Outcome::parse(&output)
}

/// Asserts `out` is a refused read: it failed, said `Permission denied`, carries the denial
/// marker, and shows no secret.
#[track_caller]
fn assert_refused(out: &Outcome, what: &str, mode: Mode) {
    assert!(!out.text.contains(SECRET), "{what}: the secret leaked: {out:#?}");
    assert!(out.exit_code.is_some_and(|c| c != 0), "{what}: the read did not fail: {out:#?}");
    assert!(out.text.contains("Permission denied"), "{what}: not refused with EACCES: {out:#?}");
    let marker = format!("[sandbox: file access denied under {} mode]", mode.name());
    assert!(out.text.contains(&marker), "{what}: not marked denied: {out:#?}");
}

fn attack_secrets(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    world.require("tar")?;
    let home = fake_home(world);
    // `denyRead` in the world's own composition file (its `[sandbox-local]` table is last).
    let config = base(world).join("world.toml");
    let mut file = std::fs::OpenOptions::new().append(true).open(&config).expect("open world.toml");
    writeln!(file, "denyRead = [\"~/.from-config\"]").expect("append denyRead");
    let key = q(home.join(".ssh/id_ed25519").display());
    let ws = Mode::WorkspaceWrite;

    // The control: unconfined, the same harness reads the key (the setup is real).
    let control = call(world, &home, &[], Mode::DangerFullAccess, None, &format!("cat {key}"));
    assert_eq!(control.ok(), SECRET, "danger-full-access must read the key: {control:#?}");

    let attempts = [
        ("cat", format!("cat {key}")),
        ("cp", format!("cp {key} copied && cat copied")),
        ("tar", format!("tar c {}", q(home.join(".ssh").display()))),
        (
            "python",
            format!("python3 -c 'print(open(\"{}\").read())'", home.join(".ssh/id_ed25519").display()),
        ),
        ("child of a child", format!("bash -c {}", q(format!("bash -c {}", q(format!("cat {key}")))))),
        ("default directory", format!("cat {}", q(home.join(".aws/credentials").display()))),
        ("default file", format!("cat {}", q(home.join(".netrc").display()))),
        ("denyRead", format!("cat {}", q(home.join(".from-config").display()))),
    ];
    for (what, command) in &attempts {
        assert_refused(&call(world, &home, &[], ws, None, command), what, ws);
    }
    assert!(!world.ws.join("copied").exists(), "cp copied the key");
    assert_refused(
        &call(world, &home, &[], Mode::ReadOnly, None, &format!("cat {key}")),
        "read-only",
        Mode::ReadOnly,
    );

    // `--deny-read` adds a path; without it the same file is readable.
    let vault = q(home.join(".vault/key").display());
    let open = call(world, &home, &[], ws, None, &format!("cat {vault}"));
    assert_eq!(open.ok(), SECRET, "without --deny-read the vault is readable: {open:#?}");
    let flags = ["--deny-read".to_owned(), home.join(".vault").display().to_string()];
    assert_refused(&call(world, &home, &flags, ws, None, &format!("cat {vault}")), "--deny-read", ws);

    // The rest of $HOME stays readable.
    let listing = call(
        world,
        &home,
        &[],
        ws,
        None,
        &format!("ls -a {} && cat {}", q(home.display()), q(home.join("notes.txt").display())),
    );
    let listed = listing.ok();
    assert!(
        listed.contains(".ssh\n") && listed.contains("notes.txt\n") && listed.ends_with("notes\n"),
        "{listing:#?}"
    );

    // Other sessions' logs (the harness's `DSH_HOME/sessions`) are out of reach.
    call(world, &home, &[], ws, Some("s1"), "true").ok();
    let log = base(world).join("home/sessions/s1.jsonl");
    assert!(log.is_file(), "the session log {} exists", log.display());
    let read_log = call(world, &home, &[], ws, Some("s2"), &format!("cat {}", q(log.display())));
    assert!(!read_log.text.contains("\"type\""), "a session log leaked: {read_log:#?}");
    assert_refused(&read_log, "session log", ws);
    Ok(())
}

#[test]
fn world_cannot_read_the_harness_users_secrets() {
    over_matrix("world_cannot_read_the_harness_users_secrets", attack_secrets);
}

fn attack_added_dir(world: &World) -> Result<(), Skip> {
    let home = fake_home(world);
    let base = base(world);
    let extra = base.join("extra");
    let sibling = base.join("sibling");
    std::fs::create_dir_all(extra.join(".git/hooks")).expect("mkdir extra");
    std::fs::write(extra.join(".envrc"), "export A=1\n").expect("write .envrc");
    std::fs::create_dir(&sibling).expect("mkdir sibling");
    world.give(&extra);
    world.give(&sibling);
    let flags = ["--add-dir".to_owned(), extra.display().to_string()];
    let ws = Mode::WorkspaceWrite;

    let made =
        call(world, &home, &flags, ws, None, &format!("echo made > {}", q(extra.join("made").display())));
    made.ok();
    assert_eq!(std::fs::read_to_string(extra.join("made")).ok().as_deref(), Some("made\n"), "{made:#?}");

    let beside =
        call(world, &home, &flags, ws, None, &format!("touch {}", q(sibling.join("made").display())));
    assert!(beside.exit_code.is_some_and(|c| c != 0), "{beside:#?}");
    assert!(beside.text.contains("[sandbox: file access denied under workspace-write mode]"), "{beside:#?}");
    assert!(!sibling.join("made").exists(), "the sibling of an added dir was written");

    let read_only =
        call(world, &home, &flags, Mode::ReadOnly, None, &format!("touch {}", q(extra.join("ro").display())));
    assert!(read_only.exit_code.is_some_and(|c| c != 0), "{read_only:#?}");
    assert!(!extra.join("ro").exists(), "read-only wrote into an added dir");

    let protected = format!(
        "touch {} || echo hook refused; echo evil >> {} || echo envrc refused",
        q(extra.join(".git/hooks/post-checkout").display()),
        q(extra.join(".envrc").display())
    );
    let out = call(world, &home, &flags, ws, None, &protected);
    assert!(out.stdout.contains("hook refused\n") && out.stdout.contains("envrc refused\n"), "{out:#?}");
    assert!(!extra.join(".git/hooks/post-checkout").exists());
    assert_eq!(std::fs::read_to_string(extra.join(".envrc")).expect("read .envrc"), "export A=1\n");

    // The user's own npm cache: the refused write is named, and no --add-dir is suggested
    // for it (confined commands get a cache of their own); one the user gives anyway works.
    let npm = home.join(".npm");
    let cache = npm.join("_cacache");
    let mkdir = format!("mkdir -p {}", q(cache.display()));
    let refused = call(world, &home, &[], ws, None, &mkdir);
    let line = format!(
        "[sandbox: write to {} refused; {} is the user's own npm cache, which no --add-dir should open: confined commands get a cache of their own through $NPM_CONFIG_CACHE]\n[sandbox: file access denied under workspace-write mode]",
        cache.display(),
        npm.display()
    );
    assert!(refused.text.contains(&line), "the refused path is not named: {refused:#?}");
    let redirect = call(world, &home, &[], ws, None, &format!("echo x > {}", q(npm.join("y").display())));
    assert!(
        redirect.text.contains(&format!("[sandbox: write to {} refused;", npm.join("y").display())),
        "{redirect:#?}"
    );
    let fixed = ["--add-dir".to_owned(), npm.display().to_string()];
    call(world, &home, &fixed, ws, None, &mkdir).ok();
    assert!(cache.is_dir(), "--add-dir {} did not let the cache be made", npm.display());
    Ok(())
}

#[test]
fn world_writes_under_an_added_dir_and_nowhere_beside_it() {
    over_matrix("world_writes_under_an_added_dir_and_nowhere_beside_it", attack_added_dir);
}

#[test]
fn add_dir_is_checked_and_reported_by_doctor() {
    let sandbox = crate::harness::Sandbox::outside_tmp();
    let root = std::fs::canonicalize(sandbox.path()).expect("canonical");
    let extra = root.join("extra");
    std::fs::create_dir(&extra).expect("mkdir");
    let (root_text, extra_text) = (root.to_str().expect("utf-8"), extra.to_str().expect("utf-8"));
    for sandboxed in [false, true] {
        let mut args = vec!["--workspace-root", root_text, "--add-dir", extra_text];
        if sandboxed {
            args.extend(["--sandbox", "workspace-write"]);
        }
        args.push("doctor");
        let out = sandbox.run(&args, "");
        let tmp = std::fs::canonicalize("/tmp").expect("/tmp");
        let expected = format!("  workspace-write: {root_text}, {extra_text}, {}\n", tmp.display());
        assert!(out.stdout.contains(&expected), "sandboxed {sandboxed}: {}", out.stdout);
    }
    let missing = root.join("missing");
    let out = sandbox.run(
        &[
            "--sandbox",
            "workspace-write",
            "--add-dir",
            missing.to_str().expect("utf-8"),
            "call",
            "bash",
            r#"{"command":"true","description":"d"}"#,
        ],
        "",
    );
    assert!(out.code != Some(0), "{out:?}");
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains(&format!(
            "sandbox-policy: writableRoots: {} is not an existing directory",
            missing.display()
        )),
        "{out:?}"
    );
}
