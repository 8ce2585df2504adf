//! Ctrl-C and SIGTERM become a tool-call abort, so an interrupted command is killed and the
//! composition is still torn down before exit.

use dsh_core::{AbortReason, AbortSignal};

/// A signal that fires on the first SIGINT or SIGTERM this process receives.
pub fn on_interrupt() -> AbortSignal {
    let signal = AbortSignal::new();
    let fire = signal.clone();
    tokio::spawn(async move {
        let reason = wait_for_interrupt().await;
        fire.abort(AbortReason::new(reason));
    });
    signal
}

#[cfg(unix)]
async fn wait_for_interrupt() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

#[cfg(not(unix))]
async fn wait_for_interrupt() -> &'static str {
    match tokio::signal::ctrl_c().await {
        Ok(()) => "interrupted",
        Err(_) => std::future::pending().await,
    }
}
