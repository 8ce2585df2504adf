//! The guardian sleeps while the harness starts nothing: no timer wakes it. Alone in its
//! binary, so no other test's spawns tell it anything meanwhile.

use std::time::Duration;

use dsh_subprocess::{SpawnSpec, SubprocessService};

/// The guardian's context switches so far (voluntary and not): each wake-up adds one.
fn switches(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the guardian runs");
    status
        .lines()
        .filter(|line| line.contains("ctxt_switches:"))
        .map(|line| line.rsplit('\t').next().and_then(|n| n.trim().parse::<u64>().ok()).expect("a count"))
        .sum()
}

async fn run_true(service: &SubprocessService) {
    let handle = service.spawn(SpawnSpec::new(vec!["true".into()])).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
}

#[tokio::test]
async fn an_idle_guardian_sleeps_and_a_record_wakes_it() {
    let service = SubprocessService::new();
    run_true(&service).await;
    let guardian = dsh_subprocess::guardian_pid().expect("the first spawn starts the guardian");
    // Past its rest after the last read, it waits without a timeout.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let before = switches(guardian);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(switches(guardian), before, "nothing woke the idle guardian for 1.5 s");
    // A new group's record wakes it (it reads at once, then rests).
    run_true(&service).await;
    let mut woken = false;
    for _ in 0..100 {
        if switches(guardian) > before {
            woken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(woken, "the records of a new group woke the guardian");
}
