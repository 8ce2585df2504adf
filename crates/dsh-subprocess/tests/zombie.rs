//! A group left with only zombies counts as exited (the harness may be a subreaper or PID 1
//! that never reaps strays). Its own binary: making the test process a subreaper must not
//! affect other tests.

use std::time::Duration;

use dsh_subprocess::{Containment, ServiceOptions, SpawnSpec, SubprocessService};
use nix::sys::signal::killpg;
use nix::unistd::Pid;

#[tokio::test]
async fn sp_08_a_group_of_zombies_counts_as_exited() {
    // SAFETY: PR_SET_CHILD_SUBREAPER only changes who adopts our orphaned descendants.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");

    // Without containment: a containing service would kill and reap the stray itself.
    let service = SubprocessService::with_options(ServiceOptions {
        containment: Containment::None,
        ..ServiceOptions::default()
    });
    let mut spec =
        SpawnSpec::new(vec!["bash".into(), "-c".into(), "sleep 0.2 >/dev/null 2>&1 & echo bye".into()]);
    spec.grace = Duration::from_millis(200);
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    // The orphaned sleep is adopted by this process, exits, and stays a zombie (nobody here
    // reaps it).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(killpg(Pid::from_raw(handle.pid() as i32), None).is_ok(), "a zombie still holds the group");
    let gone = tokio::time::timeout(Duration::from_secs(10), handle.wait_for_exit(None)).await;
    assert_eq!(gone, Ok(true));
    assert_eq!(service.live_count(), 0);
}
