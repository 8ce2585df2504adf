//! The live status line of `dsh-bash call`: while a foreground command runs, stderr shows a
//! spinner, the elapsed time and the command's latest output line (like cargo's and uv's),
//! refreshed a few times per second and cleared when the call ends, so the final output is
//! clean.
//!
//! Shown only when stderr is a terminal, and not with `--quiet`/`-q` or
//! `DSH_NO_PROGRESS=1`. It appears once the command has started (its output probe is
//! installed) and goes when it ends, so it never mixes with a terminal approval prompt.

use std::future::Future;
use std::io::IsTerminal as _;
use std::time::Duration;

use dsh_core::tools::OutputProbeSlot;
use indicatif::{ProgressBar, ProgressStyle};

/// Set to `1` to turn the status line off (like `--quiet`).
pub const NO_PROGRESS_ENV: &str = "DSH_NO_PROGRESS";

/// How often the latest output line is asked for and the line redrawn.
const REFRESH: Duration = Duration::from_millis(200);

/// How often the spinner turns.
const SPIN: Duration = Duration::from_millis(100);

/// Whether the status line is wanted: stderr is a terminal, not `quiet`, and
/// `DSH_NO_PROGRESS` is not `1`.
fn enabled(quiet: bool) -> bool {
    !quiet && std::env::var_os(NO_PROGRESS_ENV).is_none_or(|v| v != "1") && std::io::stderr().is_terminal()
}

/// Runs the call `make(probe)` builds, showing the status line of `tool` while the command
/// behind `probe` runs (when [`enabled`]). Returns the call's output; the line is cleared
/// before that.
pub async fn with_status_line<F, Fut, T>(tool: &str, quiet: bool, make: F) -> T
where
    F: FnOnce(OutputProbeSlot) -> Fut,
    Fut: Future<Output = T>,
{
    let probe = OutputProbeSlot::new();
    let call = make(probe.clone());
    if !enabled(quiet) {
        return call.await;
    }
    tokio::pin!(call);
    let mut ticker = tokio::time::interval(REFRESH);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut line: Option<ProgressBar> = None;
    let output = loop {
        tokio::select! {
            output = &mut call => break output,
            _ = ticker.tick() => {
                if probe.is_installed() {
                    let bar = line.get_or_insert_with(|| status_bar(tool));
                    bar.set_message(probe.latest_line().unwrap_or_default());
                } else if let Some(bar) = line.take() {
                    bar.finish_and_clear();
                }
            }
        }
    };
    if let Some(bar) = line {
        bar.finish_and_clear();
    }
    output
}

/// A spinner on stderr: `⠋ bash 3s <latest line>`, cut to the terminal's width.
fn status_bar(tool: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    let style = ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {elapsed} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    bar.set_prefix(tool.to_owned());
    bar.enable_steady_tick(SPIN);
    bar
}
