//! A user's toolchain works under workspace-write with no extra option: `npm install`, `pip
//! install` in a virtualenv and `cargo build` with a dependency not yet downloaded fetch from
//! the package registries (the default network policy) into the sandbox's own cache root
//! (`<DSH_HOME>/sandbox-cache`), while the user's own caches (`~/.npm`, `~/.cache/pip`,
//! `~/.cargo`) are never written by a confined command, which cannot change them either.
//! These need the registries: under `CI=true` they must pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::cell::{Mode, Outcome, User, World};
use super::host::q;
use super::matrix::{Skip, over_matrix};

/// The user's own cached file every test seeds, and what a confined command tries to put there.
const CACHED: &str = "cached by the user's own build\n";

/// A `$HOME` for `dsh-bash`, outside `/tmp`, owned by the cell's user, with the user's own
/// npm, pip and cargo caches each holding one file.
fn user_home(world: &World) -> PathBuf {
    let home = world.ws.parent().expect("the workspace has a parent").join("user-home");
    for rel in [
        ".npm/_cacache/index-v5/aa/bb",
        ".cache/pip/http-v2/marker",
        ".cargo/registry/src/index.crates.io-0000000000000000/static_assertions-1.1.0/src/lib.rs",
    ] {
        let path = home.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir -p");
        std::fs::write(&path, CACHED).expect("write");
    }
    world.give(&home);
    home
}

/// Every file and directory below `dir` with the content of each file.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).expect("read_dir").flatten() {
            let path = entry.path();
            if entry.file_type().expect("file type").is_dir() {
                pending.push(path.clone());
                found.insert(path, None);
            } else {
                found.insert(path.clone(), Some(std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    found
}

/// `dsh-bash --sandbox workspace-write call --json bash COMMAND` with `HOME` set to `home`,
/// the user's cargo home below it, and `env` added; a long timeout (registries, compiling).
fn call(world: &World, home: &Path, command: &str) -> Outcome {
    let request = json!({"command": command, "description": "d", "timeoutMs": 600000});
    let args: Vec<String> = vec![
        "--sandbox".into(),
        Mode::WorkspaceWrite.name().into(),
        "call".into(),
        "--json".into(),
        "bash".into(),
        request.to_string(),
    ];
    let mut dsh = world.dsh_with_home(&args, Some(home));
    // The harness's own environment names the user's cargo home (as rustup's does); a
    // confined cargo must not write there.
    dsh.env("CARGO_HOME", home.join(".cargo"))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    // A rustup proxy on the PATH finds its toolchains where the test's own did.
    let rustup = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
        .filter(|dir| dir.is_dir());
    if let Some(rustup) = rustup {
        dsh.env("RUSTUP_HOME", rustup);
    }
    let output = dsh.output().expect("spawn dsh-bash");
    Outcome::parse(&output)
}

/// The user's caches are as seeded, and a confined command cannot change them.
#[track_caller]
fn assert_user_caches_untouched(world: &World, home: &Path, before: &BTreeMap<PathBuf, Option<Vec<u8>>>) {
    assert_eq!(&tree(home), before, "a confined command changed the user's own caches");
    let cached = [
        home.join(".npm/_cacache/index-v5/aa/bb"),
        home.join(".cache/pip/http-v2/marker"),
        home.join(".cargo/registry/src/index.crates.io-0000000000000000/static_assertions-1.1.0/src/lib.rs"),
    ];
    let poison: String = cached.iter().map(|p| format!("echo poison >> {}; ", q(p.display()))).collect();
    let out = call(world, home, &format!("{poison}mkdir {}", q(home.join(".npm/_cacache/new").display())));
    assert_ne!(out.exit_code, Some(0), "{out:#?}");
    for path in &cached {
        assert_eq!(std::fs::read_to_string(path).expect("read a cached file"), CACHED, "{out:#?}");
    }
    assert_eq!(&tree(home), before, "a confined command changed the user's own caches: {out:#?}");
}

/// The sandbox's own cache of `tool` (below the world's `DSH_HOME`) holds files.
#[track_caller]
fn assert_sandbox_cache_used(world: &World, tool: &str, out: &Outcome) {
    let dir = world.dsh_home().join("sandbox-cache").join(tool);
    assert!(
        dir.is_dir() && !tree(&dir).is_empty(),
        "the sandbox's {tool} cache {} is empty: {out:#?}",
        dir.display()
    );
}

fn npm_install(world: &World) -> Result<(), Skip> {
    world.require("npm")?;
    let home = user_home(world);
    let before = tree(&home);
    let out = call(
        world,
        &home,
        "npm init -y >/dev/null && npm install --no-audit --no-fund --no-update-notifier is-number@7.0.0 && node -e 'console.log(require(\"is-number\")(5))'",
    );
    assert!(out.ok().ends_with("true\n"), "{out:#?}");
    assert!(world.ws.join("node_modules/is-number/package.json").is_file(), "{out:#?}");
    assert!(!out.text.contains("[sandbox:"), "{out:#?}");
    assert_sandbox_cache_used(world, "npm", &out);
    assert_user_caches_untouched(world, &home, &before);
    Ok(())
}

#[test]
fn toolchains_npm_install_under_workspace_write() {
    over_matrix("toolchains_npm_install_under_workspace_write", npm_install);
}

fn pip_install(world: &World) -> Result<(), Skip> {
    world.require("python3")?;
    let home = user_home(world);
    let before = tree(&home);
    // From the package index (no wheel directory of the host's), into the venv.
    let out = call(
        world,
        &home,
        "unset PIP_FIND_LINKS PIP_NO_INDEX PIP_NO_CACHE_DIR; python3 -m venv .venv && .venv/bin/pip install --disable-pip-version-check six==1.16.0 && .venv/bin/pip cache dir && .venv/bin/python -c 'import six; print(six.__version__)'",
    );
    let cache = world.dsh_home().canonicalize().expect("canonical DSH_HOME").join("sandbox-cache/pip");
    assert!(out.ok().ends_with(&format!("{}\n1.16.0\n", cache.display())), "{out:#?}");
    assert!(!out.text.contains("cache has been disabled"), "pip ran without a cache: {out:#?}");
    assert_user_caches_untouched(world, &home, &before);
    Ok(())
}

#[test]
fn toolchains_pip_install_in_a_venv_under_workspace_write() {
    over_matrix("toolchains_pip_install_in_a_venv_under_workspace_write", pip_install);
}

fn cargo_build_fetching(world: &World) -> Result<(), Skip> {
    if world.cell.user == User::Nobody {
        return Err(Skip("the Rust toolchain running this test is root's; nobody has none".into()));
    }
    world.require("cargo")?;
    let home = user_home(world);
    let before = tree(&home);
    world.write(
        "fetching/Cargo.toml",
        "[package]\nname = \"fetching\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nstatic_assertions = \"=1.1.0\"\n\n[workspace]\n",
    );
    world.write(
        "fetching/src/main.rs",
        "static_assertions::const_assert!(1 < 2);\nfn main() {\n    println!(\"fetched ok\");\n}\n",
    );
    let out = call(world, &home, "cd fetching && cargo build -q && ./target/debug/fetching");
    assert_eq!(out.ok(), "fetched ok\n", "{out:#?}");
    assert_sandbox_cache_used(world, "cargo/registry", &out);
    assert_user_caches_untouched(world, &home, &before);
    Ok(())
}

#[test]
fn toolchains_cargo_build_with_a_dependency_not_yet_downloaded() {
    over_matrix("toolchains_cargo_build_with_a_dependency_not_yet_downloaded", cargo_build_fetching);
}
