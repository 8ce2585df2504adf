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
    /// Decided once: fired with a reason, or sealed against firing.
    fate: OnceLock<Fate>,
    /// Made by [`AbortSignal::sealable`]: [`AbortSignal::seal`] takes effect.
    sealable: bool,
}

#[derive(Debug)]
enum Fate {
    Aborted(AbortReason),
    Sealed,
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

    /// A fresh signal of one call that the call's work may [seal](AbortSignal::seal) at its
    /// point of no return. Only a host that owns the signal for that one call makes one (a
    /// signal shared by many calls, such as a process's interrupt, must stay plain).
    pub fn sealable() -> Self {
        Self { inner: Arc::new(Inner { sealable: true, ..Inner::default() }) }
    }

    /// Fires the signal with `reason`; a no-op (returning `false`) when it already fired or
    /// was [sealed](AbortSignal::seal).
    pub fn abort(&self, reason: AbortReason) -> bool {
        let first = self.inner.fate.set(Fate::Aborted(reason)).is_ok();
        if matches!(self.inner.fate.get(), Some(Fate::Aborted(_))) {
            self.inner.token.cancel();
        }
        first
    }

    /// Work calls this at its point of no return (e.g. right before a consuming read whose
    /// result must reach the caller): `false` when the signal fired first, and the work must
    /// stop there. On a [sealable](AbortSignal::sealable) signal it also seals the signal
    /// against firing — every later `abort` is refused — so the call's result stands and its
    /// host delivers it; on a plain signal it only checks.
    pub fn seal(&self) -> bool {
        if !self.inner.sealable {
            return !self.is_aborted() && !matches!(self.inner.fate.get(), Some(Fate::Aborted(_)));
        }
        let _ = self.inner.fate.set(Fate::Sealed);
        matches!(self.inner.fate.get(), Some(Fate::Sealed))
    }

    /// True once [`AbortSignal::seal`] succeeded.
    pub fn is_sealed(&self) -> bool {
        matches!(self.inner.fate.get(), Some(Fate::Sealed))
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
        match self.inner.fate.get() {
            Some(Fate::Aborted(reason)) if self.is_aborted() => Some(reason),
            _ => None,
        }
    }

    /// Resolves when the signal fires (immediately if it already has).
    pub async fn aborted(&self) {
        self.inner.token.cancelled().await
    }

    /// The underlying token, for `select!` loops that want a cheap owned future.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }
}

/// The largest timer delay any deadline accepts, in milliseconds.
pub const MAX_TIMER_DELAY_MS: f64 = 2_147_483_647.0;

/// A fused deadline: fires when the caller signal fires or `timeout_ms` elapses, whichever is
/// first; [`Deadline::timed_out`] tells the two apart (first cause wins).
///
/// One task watches both causes; dropping the deadline ends it, so a finished call keeps
/// nothing alive (not the task, not the caller's signal, not the fused one).
#[derive(Debug)]
pub struct Deadline {
    signal: AbortSignal,
    code: String,
    watcher: Option<tokio::task::JoinHandle<()>>,
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
        if let Some(caller) = caller.filter(|c| c.is_aborted()) {
            signal.abort(caller.reason().cloned().unwrap_or_else(|| AbortReason::new("aborted")));
        }
        let timed = timeout_ms > 0.0;
        let watcher = (!signal.is_aborted() && (timed || caller.is_some())).then(|| {
            let caller = caller.cloned();
            let fused = signal.clone();
            let code = code.to_owned();
            tokio::spawn(async move {
                let caller_fired = async {
                    match &caller {
                        Some(caller) => caller.aborted().await,
                        None => std::future::pending().await,
                    }
                };
                let timer = async {
                    if timed {
                        tokio::time::sleep(Duration::from_secs_f64(timeout_ms / 1000.0)).await
                    } else {
                        std::future::pending().await
                    }
                };
                tokio::select! {
                    _ = caller_fired => {
                        let reason = caller
                            .as_ref()
                            .and_then(|c| c.reason().cloned())
                            .unwrap_or_else(|| AbortReason::new("aborted"));
                        fused.abort(reason);
                    }
                    _ = timer => {
                        fused.abort(AbortReason::with_code(
                            format!("timed out after {}ms", crate::json::js_number_text(timeout_ms)),
                            code,
                        ));
                    }
                    _ = fused.aborted() => {}
                }
            })
        });
        Ok(Self { signal, code: code.to_owned(), watcher })
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
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
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

    #[tokio::test]
    async fn a_sealed_signal_refuses_every_abort_and_an_aborted_one_refuses_the_seal() {
        let plain = AbortSignal::new();
        assert!(plain.seal(), "a plain signal that has not fired lets the work go on");
        assert!(plain.abort(AbortReason::new("shared")), "but it is not sealed");
        assert!(!plain.seal());
        let sealed = AbortSignal::sealable();
        assert!(sealed.seal());
        assert!(sealed.seal(), "sealing twice is still sealed");
        assert!(!sealed.abort(AbortReason::new("late")));
        assert!(!sealed.is_aborted() && sealed.reason().is_none() && sealed.is_sealed());
        let aborted = AbortSignal::sealable();
        assert!(aborted.abort(AbortReason::new("first")));
        assert!(!aborted.seal());
        assert!(aborted.is_aborted() && !aborted.is_sealed());
        assert_eq!(aborted.reason().map(|r| r.message.as_str()), Some("first"));
    }

    /// A finished call's deadline keeps nothing alive: its watcher ends when it is dropped,
    /// releasing the caller's signal and the fused one (a never-fired caller signal is the
    /// per-call case of every MCP call).
    #[tokio::test]
    async fn a_dropped_deadline_releases_its_watcher_and_both_signals() {
        let caller = AbortSignal::new();
        let d = Deadline::new(Some(&caller), 60_000.0, "BASH_TIMEOUT").expect("in range");
        let fused = std::sync::Arc::downgrade(&d.signal().inner);
        let watcher = d.watcher.as_ref().map(|w| w.abort_handle()).expect("a watcher");
        assert_eq!(std::sync::Arc::strong_count(&caller.inner), 2, "the watcher holds the caller");
        drop(d);
        for _ in 0..100 {
            if watcher.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(watcher.is_finished(), "the watcher ended with the deadline");
        assert_eq!(std::sync::Arc::strong_count(&caller.inner), 1, "the caller's signal is released");
        assert!(fused.upgrade().is_none(), "the fused signal is released");
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
