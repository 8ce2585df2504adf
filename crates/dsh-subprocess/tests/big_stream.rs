//! Memory stays bounded by the caps whatever a command prints. Its own binary so the peak
//! RSS it reads belongs to these streams alone.

use std::time::Duration;

use dsh_subprocess::{CaptureLimits, ServiceOptions, SpawnSpec, SubprocessService};

const MIB: u64 = 1 << 20;

/// Peak resident set size of this process (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("number");
    kib * 1024
}

fn head(bytes: &str, spill_cap: u64) -> SpawnSpec {
    let mut spec = SpawnSpec::new(vec!["head".into(), "-c".into(), bytes.into(), "/dev/zero".into()]);
    spec.stdout = CaptureLimits::new("stdout", 64_000, Some(spill_cap));
    spec.stderr = CaptureLimits::new("stderr", 64_000, Some(spill_cap));
    spec.grace = Duration::from_millis(1000);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gigabytes_of_stdout_stay_within_the_caps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = SubprocessService::with_options(ServiceOptions {
        spill_dir: Some(dir.path().to_path_buf()),
        ..ServiceOptions::default()
    });
    let before = peak_rss();

    let handle = service.spawn(head("2G", 100 * MIB)).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert_eq!(handle.stdout().total(), 2048 * MIB);
    let out = handle.stdout().collected();
    assert_eq!(out.text.len(), 64_000);
    assert!(out.text.bytes().all(|b| b == 0));
    assert_eq!((out.truncated, out.spill_path), (true, None), "spill abandoned past its cap");
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0, "abandoned spill deleted");

    // A stream that fits the spill cap leaves a complete file.
    let handle = service.spawn(head("50M", 100 * MIB)).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    let out = handle.stdout().collected();
    let path = out.spill_path.expect("complete spill");
    assert_eq!(std::fs::metadata(&path).expect("spill").len(), 50 * MIB);

    let growth = peak_rss().saturating_sub(before);
    eprintln!("peak RSS before {} KiB, growth {} KiB", before / 1024, growth / 1024);
    assert!(growth < 64 * MIB, "peak RSS grew by {} MiB", growth / MIB);
}
