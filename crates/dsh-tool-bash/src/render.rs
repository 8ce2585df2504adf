//! Result rendering: the foreground text, background read text, and the
//! background outcome.

use dsh_core::json::js_number_text;
use dsh_sandbox::{ESCALATION_HINT, SandboxMode, denial_marker, refused_path_line, runner_failed_marker};
use dsh_shell::{ShellProcessRead, ShellSandboxInfo};

use crate::value::{ForegroundView, StreamView};

/// A stream's text plus its truncation notice (appended with `\n` even after a trailing `\n`).
fn stream_text(stream: &StreamView) -> String {
    if !stream.truncated {
        return stream.text.clone();
    }
    // A spill file that could not be kept leaves no path: the full output is unavailable (the
    // reason is logged by the harness; the value's shape is the contract's).
    format!(
        "{}\n[output truncated; full output: {}]",
        stream.text,
        stream.spill_path.as_deref().unwrap_or("(unavailable)")
    )
}

/// The denial marker for a mode as recorded; a recorded mode outside the vocabulary is quoted
/// as spelled.
fn denial_line(mode: &str) -> String {
    match SandboxMode::parse(mode) {
        Some(mode) => denial_marker(mode),
        None => format!("[sandbox: file access denied under {mode} mode]"),
    }
}

/// The foreground text. The exit/signal marker is always last, so the
/// exit-status parser can anchor on it; no newline follows the last marker.
pub(crate) fn render_result(value: &ForegroundView, escalation: bool) -> String {
    let mut body = stream_text(&value.stdout);
    let err = stream_text(&value.stderr);
    if !err.is_empty() {
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str("[stderr]\n");
        body.push_str(&err);
    }
    if body.is_empty() {
        body.push_str("(no output)");
    }
    let mut markers = Vec::new();
    if let Some(sandbox) = value.sandbox.as_ref().filter(|s| s.denied) {
        // The refused path, when stderr names one, comes first: the denial marker, the hint
        // and the exit marker keep their order at the end.
        if let Some(line) = SandboxMode::parse(&sandbox.mode)
            .and_then(|m| refused_path_line(m, &value.stderr.text, &dsh_core::home::user_home()))
        {
            markers.push(line);
        }
        markers.push(denial_line(&sandbox.mode));
        if escalation {
            markers.push(ESCALATION_HINT.to_owned());
        }
    }
    if let Some(network) = &value.network {
        markers.extend(network.denied.iter().map(|hp| dsh_sandbox::network_denied_line(hp)));
        markers.extend(network.credentials.iter().map(|entry| dsh_sandbox::credential_added_line(entry)));
    }
    markers.extend(value.quarantined.iter().map(crate::value::QuarantinedView::line));
    if value.timed_out {
        markers.push(format!("[timed out after {}ms]", js_number_text(value.timeout_ms)));
    }
    if value.out_of_memory {
        markers.push("[killed: out of memory]".to_owned());
    }
    if let Some(limit) = value.usage.as_ref().and_then(|u| u.process_limit_reached) {
        markers.push(format!("[process limit reached: {limit} processes; further forks failed]"));
    }
    match (&value.signal, value.exit_code) {
        (Some(signal), _) => markers.push(format!("[killed by signal: {signal}]")),
        (None, Some(0)) => {}
        (None, Some(code)) => markers.push(format!("[exit code: {code}]")),
        // Unreachable for a consistent executor (exit code xor signal); kept as the reference
        // would print it rather than hiding the inconsistency.
        (None, None) => markers.push("[exit code: null]".to_owned()),
    }
    if markers.is_empty() {
        return body;
    }
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body + &markers.join("\n")
}

/// One background read: the delta plus lossy and sandbox notices.
///
/// Sandbox facts are stamped once at settlement and this runs on every read, so every read
/// after a denied or runner-failed settlement repeats the sandbox notice (reference quirk kept).
pub(crate) fn render_process_read(
    read: ShellProcessRead,
    sandbox: Option<&ShellSandboxInfo>,
    escalation: bool,
) -> String {
    let mut notices = Vec::new();
    if read.lossy {
        let paths: Vec<String> = [&read.stdout_spill_path, &read.stderr_spill_path]
            .into_iter()
            .flatten()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        // Without a spill file (never made, the directory full, the file removed) the marker
        // says `(unavailable)`, as the contract's marker does whatever the reason.
        if paths.is_empty() {
            notices.push("[some output was dropped from memory; full output: (unavailable)]".to_owned());
        } else {
            notices.push(format!("[some output was dropped from memory; full output: {}]", paths.join(", ")));
        }
    }
    if let Some(sandbox) = sandbox {
        notices.extend(sandbox.network_denied.iter().map(|hp| dsh_sandbox::network_denied_line(hp)));
        notices.extend(sandbox.quarantined.iter().map(dsh_sandbox::Quarantined::line));
        if sandbox.runner_failed == Some(true) {
            notices.push(runner_failed_marker(sandbox.mode));
        } else if sandbox.denied {
            notices.push(denial_marker(sandbox.mode));
            if escalation {
                notices.push(ESCALATION_HINT.to_owned());
            }
        }
    }
    let delta = read.delta;
    if notices.is_empty() {
        return delta;
    }
    let sep = if !delta.is_empty() && !delta.ends_with('\n') { "\n" } else { "" };
    format!("{delta}{sep}{}", notices.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::SandboxView;
    use std::path::PathBuf;

    fn stream(text: &str) -> StreamView {
        StreamView { text: text.into(), truncated: false, spill_path: None }
    }

    fn view(stdout: &str, stderr: &str, exit_code: Option<i64>, signal: Option<&str>) -> ForegroundView {
        ForegroundView {
            exit_code,
            signal: signal.map(str::to_owned),
            timed_out: false,
            timeout_ms: 1000.0,
            stdout: stream(stdout),
            stderr: stream(stderr),
            sandbox: None,
            network: None,
            out_of_memory: false,
            quarantined: Vec::new(),
            usage: None,
        }
    }

    #[test]
    fn a_reached_process_limit_is_a_fact_before_the_exit_marker() {
        let mut v = view("", "bash: fork: Resource temporarily unavailable\n", Some(254), None);
        v.usage = Some(crate::value::UsageView { process_limit_reached: Some(4096) });
        assert_eq!(
            render_result(&v, false),
            "[stderr]\nbash: fork: Resource temporarily unavailable\n[process limit reached: 4096 processes; further forks failed]\n[exit code: 254]"
        );
        v.usage = Some(crate::value::UsageView::default());
        assert_eq!(
            render_result(&v, false),
            "[stderr]\nbash: fork: Resource temporarily unavailable\n[exit code: 254]"
        );
    }

    #[test]
    fn an_out_of_memory_kill_is_a_fact_before_the_exit_marker() {
        let mut v = view("", "", Some(137), None);
        v.out_of_memory = true;
        assert_eq!(render_result(&v, false), "(no output)\n[killed: out of memory]\n[exit code: 137]");
        let mut v = view("", "", None, Some("SIGKILL"));
        v.out_of_memory = true;
        assert_eq!(
            render_result(&v, false),
            "(no output)\n[killed: out of memory]\n[killed by signal: SIGKILL]"
        );
    }

    #[test]
    fn network_denials_come_before_the_exit_marker() {
        let mut v = view("", "curl: (56) CONNECT tunnel failed, response 403\n", Some(56), None);
        v.network = Some(crate::value::NetworkView {
            policy: "deny".into(),
            denied: vec!["example.com:443".into(), "[::1]:80".into()],
            credentials: vec!["API_TOKEN added for api.example.com:443".into()],
        });
        assert_eq!(
            render_result(&v, false),
            "[stderr]\ncurl: (56) CONNECT tunnel failed, response 403\n[network: access to example.com:443 denied]\n[network: access to [::1]:80 denied]\n[network: credential API_TOKEN added for api.example.com:443]\n[exit code: 56]"
        );
    }

    #[test]
    fn bf_14_renderer_edge_cases() {
        let mut v = view("tail", "", None, Some("SIGTERM"));
        v.stdout.truncated = true;
        v.timed_out = true;
        assert_eq!(
            render_result(&v, false),
            "tail\n[output truncated; full output: (unavailable)]\n[timed out after 1000ms]\n[killed by signal: SIGTERM]"
        );
        assert_eq!(render_result(&view("", "err\n", Some(0), None), false), "[stderr]\nerr\n");
        assert_eq!(
            render_result(&view("", "", None, Some("SIGKILL")), false),
            "(no output)\n[killed by signal: SIGKILL]"
        );
        let mut v = view("", "", Some(0), None);
        v.timed_out = true;
        assert_eq!(render_result(&v, false), "(no output)\n[timed out after 1000ms]");
    }

    #[test]
    fn bf_02_section_joining_and_truncation_notice() {
        assert_eq!(render_result(&view("", "", Some(0), None), false), "(no output)");
        assert_eq!(render_result(&view("out\n", "err\n", Some(0), None), false), "out\n[stderr]\nerr\n");
        assert_eq!(render_result(&view("out", "err", Some(0), None), false), "out\n[stderr]\nerr");
        let mut v = view("line\n", "", Some(0), None);
        v.stdout.truncated = true;
        v.stdout.spill_path = Some("/tmp/p.log".into());
        assert_eq!(render_result(&v, false), "line\n\n[output truncated; full output: /tmp/p.log]");
        let mut v = view("x", "", Some(3), None);
        v.timeout_ms = 2.5;
        v.timed_out = true;
        assert_eq!(render_result(&v, false), "x\n[timed out after 2.5ms]\n[exit code: 3]");
    }

    #[test]
    fn bf_15_sandbox_denial_markers() {
        let mut v = view("", "denied", Some(1), None);
        v.sandbox = Some(SandboxView { mode: "read-only".into(), denied: true, runner_failed: None });
        assert_eq!(
            render_result(&v, false),
            "[stderr]\ndenied\n[sandbox: file access denied under read-only mode]\n[exit code: 1]"
        );
        assert_eq!(
            render_result(&v, true),
            "[stderr]\ndenied\n[sandbox: file access denied under read-only mode]\n[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]\n[exit code: 1]"
        );
        v.sandbox = Some(SandboxView { mode: "read-only".into(), denied: false, runner_failed: None });
        assert!(!render_result(&v, true).contains("[sandbox:"));
    }

    #[test]
    fn a_refused_path_named_in_stderr_is_named_before_the_denial_marker() {
        let stderr = "npm error rofs EROFS: read-only file system, mkdir '/srv/cache/npm/_cacache'\n";
        let mut v = view("", stderr, Some(1), None);
        v.sandbox = Some(SandboxView { mode: "workspace-write".into(), denied: true, runner_failed: None });
        assert_eq!(
            render_result(&v, true),
            format!(
                "[stderr]\n{stderr}[sandbox: write to /srv/cache/npm/_cacache refused; start the harness with --add-dir /srv/cache/npm to allow it]\n[sandbox: file access denied under workspace-write mode]\n{ESCALATION_HINT}\n[exit code: 1]"
            )
        );
        // Not denied: no line, whatever stderr says.
        v.sandbox = Some(SandboxView { mode: "workspace-write".into(), denied: false, runner_failed: None });
        assert_eq!(render_result(&v, true), format!("[stderr]\n{stderr}[exit code: 1]"));
    }

    fn read(delta: &str, lossy: bool, out: Option<&str>, err: Option<&str>) -> ShellProcessRead {
        ShellProcessRead {
            delta: delta.into(),
            lossy,
            stdout_spill_path: out.map(PathBuf::from),
            stderr_spill_path: err.map(PathBuf::from),
            spill_error: None,
        }
    }

    fn facts(denied: bool, runner_failed: Option<bool>) -> ShellSandboxInfo {
        ShellSandboxInfo {
            mode: SandboxMode::ReadOnly,
            denied,
            enforcement: Some(dsh_sandbox::SandboxEnforcement::Full),
            runner_failed,
            network_denied: Vec::new(),
            quarantined: Vec::new(),
        }
    }

    #[test]
    fn process_read_notices() {
        assert_eq!(render_process_read(read("x\n", false, None, None), None, true), "x\n");
        assert_eq!(render_process_read(read("", false, None, None), None, true), "");
        assert_eq!(
            render_process_read(read("tail", true, Some("/s/out.log"), Some("/s/err.log")), None, false),
            "tail\n[some output was dropped from memory; full output: /s/out.log, /s/err.log]"
        );
        assert_eq!(
            render_process_read(read("tail\n", true, None, None), None, false),
            "tail\n[some output was dropped from memory; full output: (unavailable)]"
        );
        let denied = facts(true, None);
        assert_eq!(
            render_process_read(
                read("[stderr]\nx: Permission denied\n", false, None, None),
                Some(&denied),
                true
            ),
            format!(
                "[stderr]\nx: Permission denied\n[sandbox: file access denied under read-only mode]\n{ESCALATION_HINT}"
            )
        );
        // Repeated after settlement, even with an empty delta.
        assert_eq!(
            render_process_read(read("", false, None, None), Some(&denied), false),
            "[sandbox: file access denied under read-only mode]"
        );
        // A runner failure outranks the denial.
        assert_eq!(
            render_process_read(read("", false, None, None), Some(&facts(true, Some(true))), true),
            "[sandbox: the sandbox runner itself failed under read-only mode — the command did not run; this is a sandbox problem, not a command failure]"
        );
        assert_eq!(render_process_read(read("ok", false, None, None), Some(&facts(false, None)), true), "ok");
    }
}
