//! The adversarial write matrix, run against every runner this crate ships.
//!
//! Each case runs `bash -c <cmd>` confined, in a fresh layout: a workspace `ws` and an
//! `outside` directory under a scratch directory that is not under `/tmp` (which
//! `workspace-write` may write). "Denied" means the effect did not happen (checked from the
//! parent) AND the exit is non-zero with stderr matching one of the runner's denial signatures
//! (so the executor would print `[sandbox: file access denied under <mode> mode]`), with no
//! runner failure. Under `read-only` every write case must be denied; under `workspace-write`
//! every case touching `outside` must be denied and every case fully inside must succeed.
//!
//! A runner may fall short only on the cases it lists as known gaps, and then it must report
//! `enforcement: partial`; a runner with no gaps must report `full`. The gap list is checked
//! exactly both ways, so a gap that closes or a new one both fail the test.
//!
//! A runner that is unusable on this host is skipped with a printed reason; set
//! `DSH_SANDBOX_REQUIRE_RUNNERS=landlock,bwrap` (or `CI=true`) to turn such a skip into a
//! failure (see `dsh_test_support::sandbox`).

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{NOBODY, is_root, spawn_confined};
use dsh_sandbox::{
    SandboxEnforcement, SandboxExecutionPolicy, SandboxMode, SandboxProvider, classify_runner_failure,
    matches_signature,
};
use dsh_sandbox_local::{
    LocalSandboxConfig, LocalSandboxProvider, ProbeOutcome, RunnerCapability, RunnerKind, RunnerProber,
    SystemProber,
};

const EPOCH_2001: i64 = 978_307_200;

struct Layout {
    _base: tempfile::TempDir,
    base: PathBuf,
    ws: PathBuf,
    out: PathBuf,
}

fn layout(owner: Option<u32>) -> Layout {
    let (dir, base) = common::scratch("dsh-sbx-matrix-");
    let ws = base.join("ws");
    let out = base.join("outside");
    for d in [&ws, &out] {
        std::fs::create_dir(d).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("file"), "original\n").unwrap();
        std::fs::set_permissions(d.join("file"), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::os::unix::fs::symlink(&out, ws.join("link_out")).unwrap();
    std::fs::write(base.join("escape.py"), ESCAPE_PY).unwrap();
    if let Some(uid) = owner {
        for p in [&ws, &out, &ws.join("sub"), &out.join("sub"), &ws.join("file"), &out.join("file")] {
            std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
        }
        std::os::unix::fs::lchown(ws.join("link_out"), Some(uid), Some(uid)).unwrap();
    }
    Layout { _base: dir, base, ws, out }
}

/// Clears the read-only flag of every mount (`mount_setattr`, x86_64/aarch64 number 442),
/// then changes the mode of the file named by argv[1].
const ESCAPE_PY: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
attr = (ctypes.c_uint64 * 4)(0, 1, 0, 0)
ret = libc.syscall(442, -100, b"/", 0x8000, attr, 32)
print("mount_setattr:", ret, os.strerror(ctypes.get_errno()), file=sys.stderr)
os.chmod(sys.argv[1], 0o600)
"#;

type Effect = Box<dyn Fn(&Layout) -> bool>;

struct Case {
    name: String,
    command: String,
    /// Touches something outside the workspace (denied under both modes).
    outside: bool,
    /// Did the write take effect? Checked from the parent after the run.
    effect: Effect,
    root_only: bool,
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

fn content_changed(p: &Path) -> bool {
    std::fs::read_to_string(p).map_or(true, |c| c != "original\n")
}

fn mode_changed(p: &Path) -> bool {
    std::fs::metadata(p).map_or(true, |m| m.mode() & 0o777 != 0o644)
}

fn side(l: &Layout, outside: bool) -> &Path {
    if outside { &l.out } else { &l.ws }
}

fn cases(l: &Layout) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: &str, command: String, outside: bool, effect: Effect| {
        cases.push(Case { name: name.to_owned(), command, outside, effect, root_only: false });
    };
    for (tag, dir, outside) in [("in", l.ws.clone(), false), ("out", l.out.clone(), true)] {
        add(
            &format!("create_{tag}"),
            format!("echo new > {}", q(&dir.join("created"))),
            outside,
            Box::new(move |l| exists(&side(l, outside).join("created"))),
        );
        add(
            &format!("append_{tag}"),
            format!("echo more >> {}", q(&dir.join("file"))),
            outside,
            Box::new(move |l| content_changed(&side(l, outside).join("file"))),
        );
        add(
            &format!("truncate_open_{tag}"),
            format!(": > {}", q(&dir.join("file"))),
            outside,
            Box::new(move |l| content_changed(&side(l, outside).join("file"))),
        );
        add(
            &format!("truncate_syscall_{tag}"),
            format!("truncate -s 0 {}", q(&dir.join("file"))),
            outside,
            Box::new(move |l| content_changed(&side(l, outside).join("file"))),
        );
        add(
            &format!("rename_{tag}"),
            format!("mv {} {}", q(&dir.join("file")), q(&dir.join("renamed"))),
            outside,
            Box::new(move |l| {
                exists(&side(l, outside).join("renamed")) || !exists(&side(l, outside).join("file"))
            }),
        );
        add(
            &format!("mkdir_{tag}"),
            format!("mkdir {}", q(&dir.join("newdir"))),
            outside,
            Box::new(move |l| exists(&side(l, outside).join("newdir"))),
        );
        add(
            &format!("rm_{tag}"),
            format!("rm {}", q(&dir.join("file"))),
            outside,
            Box::new(move |l| !exists(&side(l, outside).join("file"))),
        );
        add(
            &format!("rmdir_{tag}"),
            format!("rmdir {}", q(&dir.join("sub"))),
            outside,
            Box::new(move |l| !exists(&side(l, outside).join("sub"))),
        );
        add(
            &format!("symlink_{tag}"),
            format!("ln -s /etc/hostname {}", q(&dir.join("symlink"))),
            outside,
            Box::new(move |l| exists(&side(l, outside).join("symlink"))),
        );
        add(
            &format!("hardlink_{tag}"),
            format!("ln {} {}", q(&dir.join("file")), q(&dir.join("hardlink"))),
            outside,
            Box::new(move |l| exists(&side(l, outside).join("hardlink"))),
        );
        add(
            &format!("chmod_{tag}"),
            format!("chmod 600 {}", q(&dir.join("file"))),
            outside,
            Box::new(move |l| mode_changed(&side(l, outside).join("file"))),
        );
        add(
            &format!("utimes_{tag}"),
            format!("touch -m -d @{EPOCH_2001} {}", q(&dir.join("file"))),
            outside,
            Box::new(move |l| {
                std::fs::metadata(side(l, outside).join("file")).map_or(true, |m| m.mtime() == EPOCH_2001)
            }),
        );
        add(
            &format!("mkfifo_{tag}"),
            format!("mkfifo {}", q(&dir.join("fifo"))),
            outside,
            Box::new(move |l| exists(&side(l, outside).join("fifo"))),
        );
    }
    add(
        "create_relative_in",
        "echo rel > relative".into(),
        false,
        Box::new(|l| exists(&l.ws.join("relative"))),
    );
    add(
        "dotdot_in",
        format!("echo x > {}/sub/../dotdot_in", q(&l.ws)),
        false,
        Box::new(|l| exists(&l.ws.join("dotdot_in"))),
    );
    add(
        "dotdot_out",
        format!("echo x > {}/../outside/dotdot", q(&l.ws)),
        true,
        Box::new(|l| exists(&l.out.join("dotdot"))),
    );
    add(
        "relative_dotdot_out",
        "echo x > ../outside/rel_dotdot".into(),
        true,
        Box::new(|l| exists(&l.out.join("rel_dotdot"))),
    );
    add(
        "rename_into_ws",
        format!("mv {} {}", q(&l.out.join("file")), q(&l.ws.join("moved_in"))),
        true,
        Box::new(|l| !exists(&l.out.join("file"))),
    );
    add(
        "rename_out_of_ws",
        format!("mv {} {}", q(&l.ws.join("file")), q(&l.out.join("moved_out"))),
        true,
        Box::new(|l| exists(&l.out.join("moved_out")) || !exists(&l.ws.join("file"))),
    );
    add(
        "hardlink_into_ws",
        format!("ln {} {}", q(&l.out.join("file")), q(&l.ws.join("hard_in"))),
        true,
        Box::new(|l| exists(&l.ws.join("hard_in"))),
    );
    add(
        "hardlink_out_of_ws",
        format!("ln {} {}", q(&l.ws.join("file")), q(&l.out.join("hard_out"))),
        true,
        Box::new(|l| exists(&l.out.join("hard_out"))),
    );
    add(
        "symlink_create_via_ws_link",
        format!("echo x > {}", q(&l.ws.join("link_out/via_link"))),
        true,
        Box::new(|l| exists(&l.out.join("via_link"))),
    );
    add(
        "symlink_append_via_ws_link",
        format!("echo x >> {}", q(&l.ws.join("link_out/file"))),
        true,
        Box::new(|l| content_changed(&l.out.join("file"))),
    );
    add(
        "symlink_chmod_via_ws_link",
        format!("chmod 600 {}", q(&l.ws.join("link_out/file"))),
        true,
        Box::new(|l| mode_changed(&l.out.join("file"))),
    );
    add(
        "symlink_mkdir_via_ws_link",
        format!("mkdir {}", q(&l.ws.join("link_out/dir_via_link"))),
        true,
        Box::new(|l| exists(&l.out.join("dir_via_link"))),
    );
    let target = l.out.join("file");
    cases.push(Case {
        name: "escape_remount".into(),
        command: format!(
            "mount -o remount,rw /; mount -o remount,rw,bind {}; chmod 600 {}",
            q(&l.out),
            q(&target)
        ),
        outside: true,
        effect: Box::new(|l| mode_changed(&l.out.join("file"))),
        root_only: true,
    });
    cases.push(Case {
        name: "escape_mount_setattr".into(),
        command: format!("/usr/bin/python3 {} {}", q(&l.base.join("escape.py")), q(&target)),
        outside: true,
        effect: Box::new(|l| mode_changed(&l.out.join("file"))),
        root_only: true,
    });
    cases
}

#[derive(Debug)]
struct Outcome {
    exit: Option<i32>,
    stderr: String,
    effect: bool,
}

fn policy(mode: SandboxMode, root: &Path) -> SandboxExecutionPolicy {
    SandboxExecutionPolicy::new(mode, root.to_path_buf(), None)
}

fn bash(cmd: &str) -> Vec<String> {
    vec!["bash".into(), "-c".into(), cmd.into()]
}

/// Runs the whole matrix for one runner and mode; returns the names of the cases that fell
/// short, and the enforcement the runner reported.
fn run_matrix(
    provider: &LocalSandboxProvider,
    mode: SandboxMode,
    uid: Option<u32>,
) -> (BTreeSet<String>, SandboxEnforcement) {
    let mut gaps = BTreeSet::new();
    let mut enforcement = None;
    let mut report = String::new();
    let probe_layout = layout(uid);
    for case_index in 0..cases(&probe_layout).len() {
        let l = layout(uid);
        let case = cases(&l).swap_remove(case_index);
        if case.root_only && uid.is_some() {
            continue;
        }
        if case.name == "escape_mount_setattr" && !Path::new("/usr/bin/python3").exists() {
            eprintln!("SKIP case escape_mount_setattr: /usr/bin/python3 is not installed");
            continue;
        }
        let confined = provider.confine(&bash(&case.command), &policy(mode, &l.ws)).unwrap();
        enforcement.get_or_insert(confined.enforcement);
        let ended = spawn_confined(&confined, &l.ws, uid);
        let outcome = Outcome { exit: ended.exit, effect: (case.effect)(&l), stderr: ended.stderr };
        let must_deny = mode == SandboxMode::ReadOnly || case.outside;
        let runner_failure =
            classify_runner_failure(outcome.exit, &outcome.stderr, &confined.runner_failure_rules);
        let ok = if must_deny {
            !outcome.effect
                && outcome.exit.is_some_and(|c| c != 0)
                && matches_signature(outcome.exit, &outcome.stderr, &confined.denial_signatures)
                && runner_failure.is_none()
        } else {
            outcome.effect && outcome.exit == Some(0)
        };
        report.push_str(&format!(
            "{:>5} {:<28} must_deny={must_deny:<5} {outcome:?}\n",
            if ok { "ok" } else { "GAP" },
            case.name
        ));
        if !ok {
            gaps.insert(case.name.clone());
        }
    }
    eprintln!("--- {mode} uid={uid:?}\n{report}");
    (gaps, enforcement.expect("at least one case ran"))
}

/// Checks the gaps exactly and the reported enforcement; a runner with any gap must report
/// `partial` (a runner may be partial because of another mode's gaps).
fn check_runner(
    provider: &LocalSandboxProvider,
    mode: SandboxMode,
    uid: Option<u32>,
    known_gaps: &[&str],
    expected_enforcement: SandboxEnforcement,
) {
    let (gaps, enforcement) = run_matrix(provider, mode, uid);
    let expected: BTreeSet<String> = known_gaps.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(gaps, expected, "gaps under {mode} (uid {uid:?})");
    assert!(
        gaps.is_empty() || enforcement == SandboxEnforcement::Partial,
        "a runner with gaps must say partial"
    );
    assert_eq!(enforcement, expected_enforcement);
}

/// Sinks and reads stay usable under both modes.
fn check_sinks(provider: &LocalSandboxProvider, uid: Option<u32>) {
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let l = layout(uid);
        let mut cmd =
            format!("echo x > /dev/null && cat {} > /dev/null && echo to-stderr >&2", q(&l.out.join("file")));
        // Reopening the parent's pipe through /dev/stderr needs the pipe owner's permission,
        // which a child spawned under another uid lacks even unconfined.
        let mut expected = "to-stderr\n".to_owned();
        if uid.is_none() {
            cmd.push_str(" && echo x > /dev/stderr");
            expected.push_str("x\n");
        }
        let confined = provider.confine(&bash(&cmd), &policy(mode, &l.ws)).unwrap();
        let ended = spawn_confined(&confined, &l.ws, uid);
        assert_eq!((ended.exit, ended.stderr.as_str()), (Some(0), expected.as_str()), "{mode}");
    }
}

fn require(runner: &str, reason: &str) {
    dsh_test_support::sandbox::skip_runner(runner, reason);
}

fn usable(kind: RunnerKind) -> Result<RunnerCapability, String> {
    match SystemProber.probe(kind, Duration::from_secs(10)) {
        ProbeOutcome::Usable(capability) => Ok(capability),
        ProbeOutcome::Unusable(reason) => Err(reason),
    }
}

fn single(kind: RunnerKind, prober: Arc<dyn RunnerProber>) -> LocalSandboxProvider {
    let config = LocalSandboxConfig { runners: vec![kind], ..LocalSandboxConfig::default() };
    LocalSandboxProvider::with_prober(config, prober).unwrap()
}

/// Answers with a fixed capability: forces the Landlock runner with or without its mount
/// namespace.
struct Forced(RunnerCapability);

impl RunnerProber for Forced {
    fn probe(&self, _runner: RunnerKind, _timeout: Duration) -> ProbeOutcome {
        ProbeOutcome::Usable(self.0.clone())
    }
    fn unprobed(&self, _runner: RunnerKind) -> RunnerCapability {
        self.0.clone()
    }
    fn version(&self, _runner: RunnerKind, _timeout: Duration) -> Option<String> {
        None
    }
}

#[test]
fn write_matrix_landlock_with_mount_namespace() {
    match usable(RunnerKind::Landlock) {
        Ok(capability) if capability.mount_namespace => {}
        Ok(capability) => {
            return require("landlock", &format!("mount namespace unavailable: {:?}", capability.notes));
        }
        Err(reason) => return require("landlock", &reason),
    }
    let provider = single(RunnerKind::Landlock, Arc::new(SystemProber));
    check_sinks(&provider, None);
    check_runner(&provider, SandboxMode::ReadOnly, None, &[], SandboxEnforcement::Full);
    check_runner(&provider, SandboxMode::WorkspaceWrite, None, &[], SandboxEnforcement::Full);
}

/// The user-namespace path of the same runner: the child is not root, so it builds its mount
/// namespace inside a new user namespace.
#[test]
fn write_matrix_landlock_with_mount_namespace_as_unprivileged_user() {
    if !is_root() {
        return require("landlock", "switching to an unprivileged uid needs root");
    }
    if let Err(reason) = usable(RunnerKind::Landlock) {
        return require("landlock", &reason);
    }
    let provider = single(RunnerKind::Landlock, Arc::new(SystemProber));
    check_sinks(&provider, Some(NOBODY));
    check_runner(&provider, SandboxMode::ReadOnly, Some(NOBODY), &[], SandboxEnforcement::Full);
    check_runner(&provider, SandboxMode::WorkspaceWrite, Some(NOBODY), &[], SandboxEnforcement::Full);
}

/// Landlock without the mount namespace (the fallback when namespaces are unavailable)
/// reports `partial`, and this is why: metadata changes outside the writable roots go through.
#[test]
fn write_matrix_landlock_alone_is_partial_and_shows_its_gaps() {
    if let Err(reason) = usable(RunnerKind::Landlock) {
        return require("landlock", &reason);
    }
    let capability = RunnerCapability {
        enforcement: SandboxEnforcement::Partial,
        mount_namespace: false,
        notes: vec!["forced for this test".into()],
    };
    let provider = single(RunnerKind::Landlock, Arc::new(Forced(capability)));
    check_sinks(&provider, None);
    let mut ro_gaps = vec!["chmod_in", "chmod_out", "utimes_in", "utimes_out", "symlink_chmod_via_ws_link"];
    let mut ww_gaps = vec!["chmod_out", "utimes_out", "symlink_chmod_via_ws_link"];
    if is_root() {
        // Each escape attempt ends with a chmod outside, which Landlock does not govern.
        ro_gaps.extend(["escape_remount", "escape_mount_setattr"]);
        ww_gaps.extend(["escape_remount", "escape_mount_setattr"]);
    }
    check_runner(&provider, SandboxMode::ReadOnly, None, &ro_gaps, SandboxEnforcement::Partial);
    check_runner(&provider, SandboxMode::WorkspaceWrite, None, &ww_gaps, SandboxEnforcement::Partial);
}

#[test]
fn write_matrix_bwrap() {
    let capability = match usable(RunnerKind::Bwrap) {
        Ok(capability) => capability,
        Err(reason) => return require("bwrap", &reason),
    };
    assert_eq!(capability.enforcement, SandboxEnforcement::Partial);
    let provider = single(RunnerKind::Bwrap, Arc::new(SystemProber));
    check_sinks(&provider, None);
    // As root the command runs with `--cap-drop ALL`: remounting `/` writable is refused too.
    check_runner(&provider, SandboxMode::ReadOnly, None, &[], SandboxEnforcement::Partial);
    check_runner(
        &provider,
        SandboxMode::WorkspaceWrite,
        None,
        &["hardlink_into_ws"],
        SandboxEnforcement::Partial,
    );
}

#[test]
fn write_matrix_bwrap_as_unprivileged_user() {
    if !is_root() {
        return require("bwrap", "switching to an unprivileged uid needs root");
    }
    if let Err(reason) = usable(RunnerKind::Bwrap) {
        return require("bwrap", &reason);
    }
    let provider = single(RunnerKind::Bwrap, Arc::new(SystemProber));
    check_runner(&provider, SandboxMode::ReadOnly, Some(NOBODY), &[], SandboxEnforcement::Partial);
    check_runner(
        &provider,
        SandboxMode::WorkspaceWrite,
        Some(NOBODY),
        &["hardlink_into_ws"],
        SandboxEnforcement::Partial,
    );
}
