//! Ctrl-C and SIGTERM become a tool-call abort, so an interrupted command is killed and the
//! composition is still torn down before exit.

use dsh_core::{AbortReason, AbortSignal};

/// A signal that fires on the first SIGINT or SIGTERM this process receives. The handlers are
/// installed before this returns, so a signal arriving right after is never fatal.
pub fn on_interrupt() -> AbortSignal {
    let signal = AbortSignal::new();
    let fire = signal.clone();
    let interrupted = handlers();
    tokio::spawn(async move {
        let reason = interrupted.await;
        fire.abort(AbortReason::new(reason));
    });
    signal
}

#[cfg(unix)]
fn handlers() -> impl Future<Output = &'static str> + Send {
    use tokio::signal::unix::{SignalKind, signal};
    let streams = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
    async move {
        let (Ok(mut int), Ok(mut term)) = streams else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => "interrupted",
            _ = term.recv() => "terminated",
        }
    }
}

#[cfg(not(unix))]
fn handlers() -> impl Future<Output = &'static str> + Send {
    async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "interrupted",
            Err(_) => std::future::pending().await,
        }
    }
}
