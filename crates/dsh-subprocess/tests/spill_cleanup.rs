//! Clean-up of spill directories left by harnesses that are gone.
//!
//! A live harness is a real second process: this test binary re-run as `helper_live_harness`
//! with `TMPDIR` pointing at a scratch directory, so its private spill directories are
//! created (and locked) exactly as a harness's are.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use dsh_subprocess::{
    CaptureLimits, DEFAULT_SPILL_MAX_AGE, SPILL_MAX_AGE_ENV, SpawnSpec, SubprocessService,
    remove_stale_spill_dirs, spill_max_age,
};

const HELPER_ENV: &str = "DSH_SPILL_CLEANUP_HELPER";
const HOUR: Duration = Duration::from_secs(3600);

/// Sets the modification time of `path` (file or directory) to `age` ago.
fn age(path: &Path, age: Duration) {
    let when = SystemTime::now() - age;
    let file = std::fs::File::open(path).expect("open to set times");
    file.set_times(std::fs::FileTimes::new().set_modified(when).set_accessed(when)).expect("set times");
}

/// A directory of a harness that is gone: named like a private spill directory, holding a
/// spill file whose pid does not exist, everything two hours old.
fn stale_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir(&dir).expect("mkdir");
    let file = dir.join("dsh-subprocess-999999999-1-0123456789ab-stdout.log");
    std::fs::write(&file, "old output").expect("write");
    age(&file, 2 * HOUR);
    age(&dir, 2 * HOUR);
    dir
}

/// The helper's half: two services in one process, one with a spill file a model was told
/// about, one whose directory was only created. Prints `SPILL=<file>` and `EMPTY=<dir>`, then
/// `READY`, and lives until its stdin closes.
#[test]
fn helper_live_harness() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let spilling = SubprocessService::new();
        let mut spec = SpawnSpec::new(vec!["bash".into(), "-c".into(), "seq 1 1000".into()]);
        spec.grace = Duration::from_millis(200);
        spec.stdout = CaptureLimits::new("stdout", 100, Some(1 << 20));
        let handle = spilling.spawn(spec).expect("spawn");
        handle.wait().await;
        let spill = handle.stdout().collected().spill_path.expect("spill path");
        let empty = SubprocessService::new();
        let dir = empty.spill_dir().expect("private dir");
        println!("SPILL={}", spill.display());
        println!("EMPTY={}", dir.display());
        println!("READY");
        std::io::stdout().flush().expect("flush");
        let mut rest = String::new();
        let _ = std::io::stdin().read_line(&mut rest);
        drop((spilling, empty));
    });
}

/// Starts the helper with its temp dir at `root`; returns it with the two paths it printed.
fn start_helper(root: &Path) -> (Child, PathBuf, PathBuf) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["helper_live_harness", "--exact", "--nocapture", "--test-threads=1"])
        .env(HELPER_ENV, "1")
        .env("TMPDIR", root)
        .env(SPILL_MAX_AGE_ENV, "3600")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("helper");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut spill, mut empty) = (None, None);
    for line in lines.by_ref() {
        let line = line.expect("line");
        // libtest may print `test helper_live_harness ... ` before the first line.
        if let Some((_, path)) = line.split_once("SPILL=") {
            spill = Some(PathBuf::from(path));
        } else if let Some((_, path)) = line.split_once("EMPTY=") {
            empty = Some(PathBuf::from(path));
        } else if line == "READY" {
            break;
        }
    }
    // Keep reading, so the helper's last words never hit a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, spill.expect("helper printed SPILL"), empty.expect("helper printed EMPTY"))
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stale_directories_go_and_live_ones_stay() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path().canonicalize().expect("canonical");

    // Left before the harness starts: its first private directory triggers a sweep.
    let before_start = stale_dir(&root, "dsh-subprocess-Old789");
    let (mut child, spill, empty) = start_helper(&root);
    let spill_dir = spill.parent().expect("spill dir").to_path_buf();
    assert_eq!(spill_dir.parent(), Some(root.as_path()));
    assert_eq!(empty.parent(), Some(root.as_path()));
    wait_until("the start-up sweep removed the stale directory", || !before_start.exists());

    // Everything else, aged so only ownership, liveness and the name pattern protect it.
    let stale = stale_dir(&root, "dsh-subprocess-AbC123");
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let precious = elsewhere.join("dsh-subprocess-999999999-1-0123456789ab-stdout.log");
    std::fs::write(&precious, "precious").expect("write");
    age(&precious, 2 * HOUR);
    age(&elsewhere, 2 * HOUR);
    let link = root.join("dsh-subprocess-Sym456");
    std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
    let off_pattern = stale_dir(&root, "dsh-subprocess-TooLong7");
    age(&spill, 2 * HOUR);
    age(&spill_dir, 2 * HOUR);
    age(&empty, 2 * HOUR);

    let removed = remove_stale_spill_dirs(&root, HOUR).expect("sweep");
    assert_eq!(removed, vec![stale.clone()]);
    assert!(!stale.exists());
    let expected: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(&spill).expect("the live spill file is readable"), expected);
    assert!(empty.is_dir(), "a live harness's empty directory is kept (only its lock protects it)");
    assert!(std::fs::symlink_metadata(&link).expect("link kept").file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&precious).expect("target untouched"), "precious");
    assert!(off_pattern.is_dir());

    // Fresh enough: nothing goes, whoever owns it.
    let young = stale_dir(&root, "dsh-subprocess-Young1");
    age(&young, Duration::from_secs(60));
    assert_eq!(remove_stale_spill_dirs(&root, HOUR).expect("sweep"), Vec::<PathBuf>::new());
    assert!(young.is_dir());

    // Once the harness is gone, its empty directory is gone with it (it removes what it made
    // and left empty as it exits), and the one holding a spill file is stale like any other.
    drop(child.stdin.take());
    assert!(child.wait().expect("helper exits").success());
    assert!(!empty.exists(), "the harness removed its empty directory as it exited");
    let removed = remove_stale_spill_dirs(&root, HOUR).expect("sweep");
    assert_eq!(removed, vec![spill_dir]);
    assert!(young.is_dir() && off_pattern.is_dir() && link.exists());
}

#[test]
fn a_directory_of_another_user_is_left() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path();
    let theirs = stale_dir(root, "dsh-subprocess-Theirs");
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: giving a directory to another user needs root");
        return;
    }
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    age(&theirs, 2 * HOUR);
    let mine = stale_dir(root, "dsh-subprocess-Mine01");
    assert_eq!(std::fs::metadata(&theirs).expect("meta").uid(), 65534);
    assert_eq!(remove_stale_spill_dirs(root, HOUR).expect("sweep"), vec![mine]);
    assert!(theirs.join("dsh-subprocess-999999999-1-0123456789ab-stdout.log").is_file());
}

#[test]
fn a_directory_holding_a_subdirectory_is_left() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path();
    let dir = stale_dir(root, "dsh-subprocess-Nested");
    let inner = dir.join("inner");
    std::fs::create_dir(&inner).expect("mkdir");
    age(&inner, 2 * HOUR);
    age(&dir, 2 * HOUR);
    assert_eq!(remove_stale_spill_dirs(root, HOUR).expect("sweep"), Vec::<PathBuf>::new());
    assert!(inner.is_dir());
}

#[test]
fn max_age_knob() {
    assert_eq!(spill_max_age(None), Some(DEFAULT_SPILL_MAX_AGE));
    assert_eq!(spill_max_age(Some("  ")), Some(DEFAULT_SPILL_MAX_AGE));
    assert_eq!(spill_max_age(Some("90")), Some(Duration::from_secs(90)));
    assert_eq!(spill_max_age(Some("0")), None);
    assert_eq!(spill_max_age(Some("1h")), None);
    assert_eq!(DEFAULT_SPILL_MAX_AGE, Duration::from_secs(86_400));
}

#[tokio::test]
async fn children_do_not_inherit_the_held_directory() {
    let service = SubprocessService::new();
    let dir = service.spill_dir().expect("private dir");
    let mut spec = SpawnSpec::new(vec![
        "bash".into(),
        "-c".into(),
        "for f in /proc/$$/fd/*; do readlink \"$f\"; done".into(),
    ]);
    spec.grace = Duration::from_millis(200);
    let handle = service.spawn(spec).expect("spawn");
    handle.wait().await;
    let fds = handle.stdout().collected().text;
    assert!(!fds.contains(dir.to_str().expect("utf-8")), "{fds}");
}
