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

#[cfg(target_arch = "x86_64")]
const POLLS: [libc::c_long; 2] = [libc::SYS_poll, libc::SYS_ppoll];
#[cfg(not(target_arch = "x86_64"))]
const POLLS: [libc::c_long; 1] = [libc::SYS_ppoll];

/// Whether the guardian is blocked polling two descriptors (the records and the end; while it
/// rests it polls the end alone): `/proc/<pid>/syscall` holds the call's number and arguments,
/// the second of which is the number of descriptors for `poll` and `ppoll` alike.
fn waiting_for_records(pid: i32) -> bool {
    let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    let fields: Vec<&str> = call.split_whitespace().collect();
    let polling =
        fields.first().and_then(|n| n.parse::<libc::c_long>().ok()).is_some_and(|n| POLLS.contains(&n));
    polling && fields.get(2) == Some(&"0x2")
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
    // After its last rest it waits for records and the end together, without a timeout.
    let mut idle = false;
    for _ in 0..250 {
        if waiting_for_records(guardian) {
            idle = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        idle,
        "the guardian waits on both pipes: {:?}",
        std::fs::read_to_string(format!("/proc/{guardian}/syscall"))
    );
    let before = switches(guardian);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(switches(guardian), before, "nothing woke the idle guardian for 1.5 s");
    assert!(waiting_for_records(guardian));
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
