//! The escape matrix shared by the containment tests: each case starts a sleeper whose `argv[0]`
//! is `<marker>-<case>`, so a `/proc` scan finds exactly this test's survivors.

/// How many escape cases [`script`] starts.
pub const CASES: usize = 6;

/// A marker unique to this process and call.
pub fn marker() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("dsh-escape-{}-{nanos}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A script that starts every escape, waits until all of them run, then runs `then`.
pub fn script(marker: &str, then: &str) -> String {
    let m = marker;
    [
        format!("setsid bash -c 'exec -a {m}-setsid sleep 1000' >/dev/null 2>&1 &"),
        format!("nohup bash -c 'exec -a {m}-nohup sleep 1000' >/dev/null 2>&1 &"),
        format!("( (exec -a {m}-doublefork sleep 1000 >/dev/null 2>&1 &) & )"),
        format!("exec -a {m}-disown sleep 1000 >/dev/null 2>&1 & disown"),
        format!("perl -e 'setpgrp(0,0); exec {{\"sleep\"}} \"{m}-setpgrp\", \"1000\"' >/dev/null 2>&1 &"),
        format!("setsid bash -c 'exec >/dev/null 2>&1 </dev/null; exec -a {m}-daemon sleep 1000' &"),
        format!("until [ \"$(pgrep -c -f '^{m}-')\" -ge {CASES} ]; do sleep 0.01; done"),
        then.to_owned(),
    ]
    .join("\n")
}

/// Live processes whose `argv[0]` starts with `<marker>-`.
pub fn survivors(marker: &str) -> Vec<i32> {
    let prefix = format!("{marker}-");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
            argv0.starts_with(prefix.as_bytes()) && !matches!(state, Some("Z" | "X") | None)
        })
        .collect()
}

/// `argv[0]` of each survivor, for a failure message.
pub fn names(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(cmdline.split(|b| *b == 0).next().unwrap_or_default()).into_owned()
        })
        .collect()
}

/// Resolves once every escape of `marker` runs (fails after 20 s).
pub async fn armed(marker: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while survivors(marker).len() < CASES {
        assert!(std::time::Instant::now() < deadline, "the escapes never all started");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Waits (bounded, generously) until no process carries the marker; fails naming survivors.
pub async fn assert_no_survivors(marker: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let alive = survivors(marker);
        if alive.is_empty() {
            return;
        }
        if std::time::Instant::now() > deadline {
            let names = names(&alive);
            kill_all(&alive);
            panic!("survivors: {names:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// SIGKILL each pid (cleanup after a failed or opt-out test).
pub fn kill_all(pids: &[i32]) {
    if !pids.is_empty() {
        let _ =
            std::process::Command::new("kill").arg("-KILL").args(pids.iter().map(i32::to_string)).status();
    }
}
