use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_subprocess::{ServiceOptions, SpillNamer, SubprocessService};

use crate::{bash, limits, service_in};

const HUNDRED_LINES: &str = r#"for i in $(seq 1 100); do printf "line-%04d\n" $i; done"#;

fn hundred_lines() -> Vec<u8> {
    (1..=100).flat_map(|i| format!("line-{i:04}\n").into_bytes()).collect()
}

fn spilling(script: &str) -> dsh_subprocess::SpawnSpec {
    let mut spec = bash(script);
    spec.stdout = limits("stdout", 100, Some(1 << 20));
    spec.stderr = limits("stderr", 100, Some(1 << 20));
    spec
}

fn is_spill_name(name: &str, label: &str) -> bool {
    let Some(rest) = name.strip_prefix("dsh-subprocess-") else { return false };
    let Some(rest) = rest.strip_suffix(&format!("-{label}.log")) else { return false };
    let parts: Vec<&str> = rest.split('-').collect();
    parts.len() == 3
        && parts[0] == std::process::id().to_string()
        && parts[1].parse::<u64>().is_ok()
        && parts[2].len() == 12
        && parts[2].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[tokio::test]
async fn spill_holds_the_complete_stream_in_the_injected_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = service_in(dir.path());
    let handle = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    let out = handle.stdout().collected();
    assert_eq!(out.text.as_bytes(), &hundred_lines()[900..]);
    assert!(out.truncated);
    let path = out.spill_path.expect("spill path");
    assert_eq!(path.parent(), Some(dir.path()));
    let name = path.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(is_spill_name(name, "stdout"), "{name}");
    assert_eq!(std::fs::metadata(&path).expect("meta").mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(&path).expect("spill"), hundred_lines());
    assert!(!handle.stderr().collected().truncated);
}

#[tokio::test]
async fn sp_09_spill_location() {
    let service = SubprocessService::new();
    assert_eq!(service.existing_spill_dir(), None, "the private dir is created lazily");
    let handle = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    handle.wait().await;
    let path = handle.stdout().collected().spill_path.expect("spill path");
    let dir = service.existing_spill_dir().expect("dir exists after a spill");
    assert_eq!(path.parent(), Some(dir.as_path()));
    assert_eq!(dir.parent(), Some(std::env::temp_dir().as_path()));
    let dir_name = dir.file_name().and_then(|n| n.to_str()).expect("dir name");
    assert!(
        dir_name.starts_with("dsh-subprocess-") && dir_name.len() == "dsh-subprocess-".len() + 6,
        "{dir_name}"
    );
    assert_eq!(std::fs::metadata(&dir).expect("meta").permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
    let name = path.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(is_spill_name(name, "stdout"), "{name}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// Names the first `planted` attempts `planted-<label>.log`, later ones `fresh-<n>-<label>.log`.
struct PlantedFirst {
    planted: usize,
    calls: AtomicUsize,
}

impl SpillNamer for PlantedFirst {
    fn file_name(&self, label: &str) -> String {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n < self.planted { format!("planted-{label}.log") } else { format!("fresh-{n}-{label}.log") }
    }
}

fn service_with_namer(dir: &Path, planted: usize) -> Arc<SubprocessService> {
    SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(dir.to_path_buf()),
        spill_namer: Arc::new(PlantedFirst { planted, calls: AtomicUsize::new(0) }),
        ..ServiceOptions::default()
    })
}

#[tokio::test]
async fn a_planted_symlink_at_the_spill_path_is_never_followed() {
    let spill_dir = tempfile::tempdir().expect("tempdir");
    let victim_dir = tempfile::tempdir().expect("tempdir");
    let victim = victim_dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").expect("victim");
    let planted = spill_dir.path().join("planted-stdout.log");
    std::os::unix::fs::symlink(&victim, &planted).expect("plant");

    // The planted name comes first; a fresh name is used instead.
    let service = service_with_namer(spill_dir.path(), 1);
    let handle = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    handle.wait().await;
    let out = handle.stdout().collected();
    assert_eq!(out.spill_path, Some(spill_dir.path().join("fresh-1-stdout.log")));
    assert_eq!(std::fs::read(spill_dir.path().join("fresh-1-stdout.log")).expect("spill"), hundred_lines());
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious");
    assert!(std::fs::symlink_metadata(&planted).expect("still there").file_type().is_symlink());

    // Every name collides: the spill is reported unavailable, the victim still untouched.
    let service = service_with_namer(spill_dir.path(), usize::MAX);
    let handle = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    handle.wait().await;
    let out = handle.stdout().collected();
    assert!(out.truncated);
    assert_eq!(out.spill_path, None);
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious");
}

#[tokio::test]
async fn a_stream_past_the_spill_cap_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = service_in(dir.path());
    let mut spec = spilling(HUNDRED_LINES);
    spec.stdout = limits("stdout", 100, Some(500));
    let handle = service.spawn(spec).expect("spawn");
    handle.wait().await;
    let out = handle.stdout().collected();
    assert_eq!(out.text.as_bytes(), &hundred_lines()[900..]);
    assert_eq!((out.truncated, out.spill_path), (true, None));
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

/// `<base>/spill` (mode 0700) and `<base>/victim`, in a fresh scratch directory.
fn spill_and_victim() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let base = tempfile::tempdir().expect("tempdir");
    let spill = base.path().join("spill");
    let victim = base.path().join("victim");
    std::fs::create_dir(&spill).expect("mkdir spill");
    std::fs::set_permissions(&spill, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::create_dir(&victim).expect("mkdir victim");
    (base, spill, victim)
}

/// Moves `spill` aside (to `spill-old`) and plants a symlink to `victim` in its place.
fn swap_for_symlink(spill: &Path, victim: &Path) -> std::path::PathBuf {
    let old = spill.with_file_name("spill-old");
    std::fs::rename(spill, &old).expect("move the spill dir aside");
    std::os::unix::fs::symlink(victim, spill).expect("plant symlink");
    old
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_spill_dir_replaced_by_a_symlink_still_gets_the_files() {
    let (_base, spill, victim) = spill_and_victim();
    let service = service_in(&spill);
    let first = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    first.wait().await;
    let first_path = first.stdout().collected().spill_path.expect("first spill");

    let old = swap_for_symlink(&spill, &victim);
    let second = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    second.wait().await;
    let second_path = second.stdout().collected().spill_path.expect("second spill");

    // Reported as `<dir as spelled>/<name>`; written where the directory really is.
    assert_eq!(second_path.parent(), Some(spill.as_path()));
    let second_name = second_path.file_name().expect("name").to_string_lossy().into_owned();
    let first_name = first_path.file_name().expect("name").to_string_lossy().into_owned();
    let mut expected = vec![first_name, second_name.clone()];
    expected.sort();
    assert_eq!(names_in(&old), expected);
    assert_eq!(std::fs::read(old.join(&second_name)).expect("spill"), hundred_lines());
    assert_eq!(names_in(&victim), Vec::<String>::new(), "nothing is written through the symlink");
}

/// Always the same name, so a test can plant a victim under it.
struct FixedName;

impl SpillNamer for FixedName {
    fn file_name(&self, label: &str) -> String {
        format!("fixed-{label}.log")
    }
}

#[tokio::test]
async fn an_abandoned_spill_is_deleted_where_it_was_created() {
    let (base, spill, victim) = spill_and_victim();
    std::fs::write(victim.join("fixed-stdout.log"), "precious").expect("victim");
    let fifo = base.path().join("go");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(spill.clone()),
        spill_namer: Arc::new(FixedName),
        ..ServiceOptions::default()
    });
    // 200 bytes (spilled: past the 100-byte tail), then, once told, 5000 more (past the cap).
    let script = format!("head -c 200 /dev/zero; read -r _ < '{}'; head -c 5000 /dev/zero", fifo.display());
    let mut spec = bash(&script);
    spec.stdout = limits("stdout", 100, Some(1000));
    let handle = service.spawn(spec).expect("spawn");
    handle.stdout().wait_for_total(200).await;
    assert_eq!(handle.stdout().read_from(0).spill_path, Some(spill.join("fixed-stdout.log")));

    let old = swap_for_symlink(&spill, &victim);
    std::fs::write(&fifo, "go\n").expect("release the child");
    handle.wait().await;
    let out = handle.stdout().collected();
    assert_eq!((out.truncated, out.spill_path), (true, None));
    assert_eq!(names_in(&old), Vec::<String>::new(), "the abandoned spill is gone");
    assert_eq!(std::fs::read_to_string(victim.join("fixed-stdout.log")).expect("victim"), "precious");
}

#[tokio::test]
async fn a_spill_dir_others_can_write_is_refused() {
    let (_base, spill, _victim) = spill_and_victim();
    std::fs::set_permissions(&spill, std::fs::Permissions::from_mode(0o770)).expect("chmod");
    let service = service_in(&spill);
    let err = service.spill_dir().expect_err("group-writable");
    let euid = nix::unistd::geteuid().as_raw();
    assert_eq!(
        err.to_string(),
        format!(
            "spill directory {} must be owned by uid {euid} and not writable by group or others (it is owned by uid {euid} with mode 770)",
            spill.display()
        )
    );
    let handle = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    handle.wait().await;
    let out = handle.stdout().collected();
    assert_eq!((out.truncated, out.spill_path), (true, None));
    assert_eq!(names_in(&spill), Vec::<String>::new());
}

#[tokio::test]
async fn spill_dir_creates_the_private_directory_and_names_it_canonically() {
    let service = SubprocessService::new();
    assert_eq!(service.existing_spill_dir(), None);
    let canonical = service.spill_dir().expect("created");
    assert_eq!(service.spill_dir().expect("the same one"), canonical);
    assert_eq!(std::fs::canonicalize(&canonical).expect("exists"), canonical);
    let temp = std::env::temp_dir();
    assert_eq!(canonical.parent(), Some(std::fs::canonicalize(&temp).expect("temp").as_path()));
    let spelled = service.existing_spill_dir().expect("exists now");
    assert_eq!(spelled, temp.join(canonical.file_name().expect("name")));
    let meta = std::fs::metadata(&canonical).expect("meta");
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());

    let handle = service.spawn(spilling(HUNDRED_LINES)).expect("spawn");
    handle.wait().await;
    let path = handle.stdout().collected().spill_path.expect("spill");
    assert_eq!(path.parent(), Some(spelled.as_path()));
    std::fs::remove_dir_all(&canonical).expect("clean up");
}

/// A process spawned for an owner spills into that owner's directory: a private directory of
/// its own (not the shared one, not another owner's), the same one for each of its processes.
#[tokio::test]
async fn each_owner_spills_into_a_private_directory_of_its_own() {
    let service = SubprocessService::new();
    let spill_of = |owner: Option<&str>| {
        let mut spec = spilling(HUNDRED_LINES);
        spec.spill_owner = owner.map(str::to_owned);
        let handle = service.spawn(spec).expect("spawn");
        async move {
            handle.wait().await;
            handle.stdout().collected().spill_path.expect("spill path")
        }
    };
    let (a, a_again, b, shared) = (
        spill_of(Some("a")).await,
        spill_of(Some("a")).await,
        spill_of(Some("b")).await,
        spill_of(None).await,
    );
    let dir = |p: &Path| p.parent().expect("a directory").to_path_buf();
    assert_eq!(dir(&a), dir(&a_again));
    assert_eq!(dir(&a), service.owned_spill_dir("a").expect("a's directory"));
    assert_ne!(dir(&a), dir(&b));
    assert_eq!(Some(dir(&shared)), service.existing_spill_dir());
    for path in [&a, &b, &shared] {
        let parent = dir(path);
        assert_eq!(parent.parent(), Some(std::env::temp_dir().as_path()));
        assert!(
            parent.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("dsh-subprocess-"))
        );
        assert_eq!(std::fs::metadata(&parent).expect("meta").mode() & 0o777, 0o700);
        assert_eq!(std::fs::read(path).expect("spill"), hundred_lines());
    }
    for path in [&a, &b, &shared] {
        std::fs::remove_dir_all(dir(path)).expect("clean up");
    }
}

/// In an injected directory an owner spills into its subdirectory `owner-<hash>` (mode
/// `0700`), the same name for every service; one planted there by someone else is refused.
#[tokio::test]
async fn in_an_injected_directory_each_owner_spills_into_a_subdirectory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = service_in(dir.path());
    let mut spec = spilling(HUNDRED_LINES);
    spec.spill_owner = Some("a".to_owned());
    let handle = service.spawn(spec).expect("spawn");
    handle.wait().await;
    let path = handle.stdout().collected().spill_path.expect("spill path");
    let owned = path.parent().expect("a directory").to_path_buf();
    assert_eq!(owned.parent(), Some(dir.path()));
    assert!(owned.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("owner-")), "{owned:?}");
    assert_eq!(std::fs::metadata(&owned).expect("meta").mode() & 0o777, 0o700);
    assert_eq!(std::fs::read(&path).expect("spill"), hundred_lines());
    let again = service_in(dir.path()).owned_spill_dir("a").expect("the same directory");
    assert_eq!(again, std::fs::canonicalize(&owned).expect("canonical"));
    let other = service_in(dir.path()).owned_spill_dir("b").expect("b's directory");
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let refused = service_in(dir.path()).owned_spill_dir("b").expect_err("open to others");
    assert!(refused.to_string().contains("must be owned by uid"), "{refused}");
}
