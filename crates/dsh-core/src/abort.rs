//! Caller-owned cancellation with a reason, and the first-cause deadline built on it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// A cancellation signal that remembers why it fired.
///
/// Cloning shares the signal. The first `abort` wins: its reason is the one every observer
/// sees, which is how the executor tells its own timeout apart from a caller's abort.
#[derive(Clone, Debug, Default)]
pub struct AbortSignal {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    token: CancellationToken,
    reason: OnceLock<AbortReason>,
}

/// Why a signal fired: a free-text reason and an optional machine code (e.g. `BASH_TIMEOUT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbortReason {
    /// The free-text reason every observer sees.
    pub message: String,
    /// A machine code for the reason (e.g. `BASH_TIMEOUT`), when there is one.
    pub code: Option<String>,
}

impl AbortReason {
    /// A reason with a message and no code.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), code: None }
    }
    /// A reason with a message and a machine code.
    pub fn with_code(message: impl Into<String>, code: impl Into<String>) -> Self {
        Self { message: message.into(), code: Some(code.into()) }
    }
}

impl AbortSignal {
    /// A fresh signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal with `reason`; a no-op (returning `false`) when it already fired.
    pub fn abort(&self, reason: AbortReason) -> bool {
        let first = self.inner.reason.set(reason).is_ok();
        self.inner.token.cancel();
        first
    }

    /// Fires the signal with the plain reason `aborted`.
    pub fn abort_default(&self) -> bool {
        self.abort(AbortReason::new("aborted"))
    }

    /// True once the signal has fired.
    pub fn is_aborted(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// The reason of the first abort, once fired.
    pub fn reason(&self) -> Option<&AbortReason> {
        if self.is_aborted() { self.inner.reason.get() } else { None }
    }

    /// Resolves when the signal fires (immediately if it already has).
    pub async fn aborted(&self) {
        self.inner.token.cancelled().await
    }

    /// The underlying token, for `select!` loops that want a cheap owned future.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// A signal that fires when `self` or any of `others` fires, carrying the first cause.
    pub fn fuse(&self, others: &[&AbortSignal]) -> AbortSignal {
        let fused = AbortSignal::new();
        let mut sources: Vec<AbortSignal> = vec![self.clone()];
        sources.extend(others.iter().map(|s| (*s).clone()));
        if let Some(first) = sources.iter().find(|s| s.is_aborted()) {
            fused.abort(first.reason().cloned().unwrap_or_else(|| AbortReason::new("aborted")));
            return fused;
        }
        for source in sources {
            let fused = fused.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = source.aborted() => {
                        let reason = source.reason().cloned().unwrap_or_else(|| AbortReason::new("aborted"));
                        fused.abort(reason);
                    }
                    _ = fused.aborted() => {}
                }
            });
        }
        fused
    }
}

/// The largest timer delay any deadline accepts, in milliseconds.
pub const MAX_TIMER_DELAY_MS: f64 = 2_147_483_647.0;

/// A fused deadline: fires when the caller signal fires or `timeout_ms` elapses, whichever is
/// first; [`Deadline::timed_out`] tells the two apart (first cause wins).
#[derive(Debug)]
pub struct Deadline {
    signal: AbortSignal,
    code: String,
    timer: Option<tokio::task::JoinHandle<()>>,
}

/// Error for a deadline whose bound is outside `0 < ms ≤ 2147483647`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("deadline timeoutMs must be a positive finite number no greater than 2147483647")]
pub struct DeadlineRangeError;

impl Deadline {
    /// Arms a deadline. `timeout_ms <= 0` means "no timer"; above the timer bound is an error.
    pub fn new(
        caller: Option<&AbortSignal>,
        timeout_ms: f64,
        code: &str,
    ) -> Result<Self, DeadlineRangeError> {
        if timeout_ms.is_nan() || timeout_ms > MAX_TIMER_DELAY_MS {
            return Err(DeadlineRangeError);
        }
        let signal = AbortSignal::new();
        if let Some(caller) = caller {
            if caller.is_aborted() {
                signal.abort(caller.reason().cloned().unwrap_or_else(|| AbortReason::new("aborted")));
            } else {
                let caller = caller.clone();
                let fused = signal.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = caller.aborted() => {
                            let reason = caller.reason().cloned().unwrap_or_else(|| AbortReason::new("aborted"));
                            fused.abort(reason);
                        }
                        _ = fused.aborted() => {}
                    }
                });
            }
        }
        let timer = (timeout_ms > 0.0 && !signal.is_aborted()).then(|| {
            let fused = signal.clone();
            let code = code.to_owned();
            let delay = Duration::from_secs_f64(timeout_ms / 1000.0);
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {
                        fused.abort(AbortReason::with_code(
                            format!("timed out after {}ms", crate::json::js_number_text(timeout_ms)),
                            code,
                        ));
                    }
                    _ = fused.aborted() => {}
                }
            })
        });
        Ok(Self { signal, code: code.to_owned(), timer })
    }

    /// The fused signal to hand to the work.
    pub fn signal(&self) -> &AbortSignal {
        &self.signal
    }

    /// True when this deadline's own timer was the first cause.
    pub fn timed_out(&self) -> bool {
        self.signal.reason().is_some_and(|r| r.code.as_deref() == Some(self.code.as_str()))
    }

    /// True when the fused signal fired for any other cause (the caller, a foreign deadline).
    pub fn aborted(&self) -> bool {
        self.signal.is_aborted() && !self.timed_out()
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_abort_reason_wins() {
        let s = AbortSignal::new();
        assert!(s.abort(AbortReason::new("one")));
        assert!(!s.abort(AbortReason::new("two")));
        assert_eq!(s.reason().map(|r| r.message.as_str()), Some("one"));
    }

    #[tokio::test]
    async fn deadline_timer_is_first_cause() {
        let d = Deadline::new(None, 20.0, "BASH_TIMEOUT").expect("in range");
        d.signal().aborted().await;
        assert!(d.timed_out());
        assert!(!d.aborted());
    }

    #[tokio::test]
    async fn deadline_caller_abort_is_not_timeout() {
        let caller = AbortSignal::new();
        let d = Deadline::new(Some(&caller), 10_000.0, "BASH_TIMEOUT").expect("in range");
        caller.abort(AbortReason::new("stop"));
        d.signal().aborted().await;
        assert!(d.aborted());
        assert!(!d.timed_out());
    }

    #[test]
    fn deadline_rejects_out_of_range() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            assert_eq!(
                Deadline::new(None, 2_147_483_648.0, "X").err().map(|e| e.to_string()),
                Some("deadline timeoutMs must be a positive finite number no greater than 2147483647".into())
            );
        });
    }
}
