//! When to stop serving: the caller's token, or SIGINT/SIGTERM.

use crate::options::McpOptions;

/// Resolves when the server should stop.
pub(crate) async fn shutdown_requested(options: &McpOptions) {
    let token = options.shutdown.clone();
    if !options.handle_signals {
        return token.cancelled().await;
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = token.cancelled() => {}
                    _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                    _ = int.recv() => tracing::info!("SIGINT: shutting down"),
                }
            }
            _ => {
                tracing::warn!("could not install signal handlers; only the shutdown token stops the server");
                token.cancelled().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        tokio::select! {
            _ = token.cancelled() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
}
