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
/// Both causes are watched by [`Deadline::watch`], inside the task that awaits the work:
/// no task is spawned, so a call costs no extra wake-up of another thread, and a finished
/// call keeps nothing alive (dropping the deadline releases the caller's signal and the
/// fused one). The timer counts from [`Deadline::new`].
#[derive(Debug)]
pub struct Deadline {
    signal: AbortSignal,
    code: String,
    caller: Option<AbortSignal>,
    /// When the timer fires, and its bound as given (for the reason's text).
    timer: Option<(tokio::time::Instant, f64)>,
}

/// Error for a deadline whose bound is outside `0 < ms ≤ 2147483647`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("deadline timeoutMs must be a positive finite number no greater than 2147483647")]
pub struct DeadlineRangeError;

impl Deadline {
    /// Arms a deadline. `timeout_ms <= 0` means "no timer"; above the timer bound is an error.
    /// A caller signal that already fired fires the fused one at once.
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
            signal.abort(caller_reason(caller));
        }
        let timer = (timeout_ms > 0.0).then(|| {
            (tokio::time::Instant::now() + Duration::from_secs_f64(timeout_ms / 1000.0), timeout_ms)
        });
        Ok(Self { signal, code: code.to_owned(), caller: caller.cloned(), timer })
    }

    /// The fused signal to hand to the work.
    pub fn signal(&self) -> &AbortSignal {
        &self.signal
    }

    /// Runs `work` to its end. While it runs, the first cause to fire fires the fused signal
    /// (the work sees it and winds down); `work` is never cut short.
    pub async fn watch<F: std::future::Future>(&self, work: F) -> F::Output {
        self.watch_ended(work, || false).await
    }

    /// [`Deadline::watch`] for work whose end shows before `work` resolves (a process that
    /// exited, its pipes still draining): when the timer fires and `ended` says the work is
    /// over already, the timer does not count. So a harness stopped past the deadline (or
    /// merely slow to reap) never calls a command that ended in time timed out: on its
    /// return both the exit and the timer are ready, and the exit wins.
    pub async fn watch_ended<F: std::future::Future>(&self, work: F, ended: impl Fn() -> bool) -> F::Output {
        tokio::pin!(work);
        if self.signal.is_aborted() {
            return work.await;
        }
        let caller_fired = async {
            match &self.caller {
                Some(caller) => caller.aborted().await,
                None => std::future::pending().await,
            }
        };
        let timer = async {
            match self.timer {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            output = &mut work => return output,
            () = self.signal.aborted() => {}
            () = caller_fired => {
                if let Some(caller) = &self.caller {
                    self.signal.abort(caller_reason(caller));
                }
            }
            () = timer => {
                if ended() {
                    return work.await;
                }
                let ms = self.timer.map_or(0.0, |(_, ms)| ms);
                self.signal.abort(AbortReason::with_code(
                    format!("timed out after {}ms", crate::json::js_number_text(ms)),
                    self.code.as_str(),
                ));
            }
        }
        work.await
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

/// The reason a fired caller signal passes on.
fn caller_reason(caller: &AbortSignal) -> AbortReason {
    caller.reason().cloned().unwrap_or_else(|| AbortReason::new("aborted"))
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
        d.watch(d.signal().aborted()).await;
        assert!(d.timed_out());
        assert!(!d.aborted());
        assert_eq!(d.signal().reason().map(|r| r.message.as_str()), Some("timed out after 20ms"));
    }

    #[tokio::test]
    async fn deadline_caller_abort_is_not_timeout() {
        let caller = AbortSignal::new();
        let d = Deadline::new(Some(&caller), 10_000.0, "BASH_TIMEOUT").expect("in range");
        let fire = caller.clone();
        tokio::spawn(async move { fire.abort(AbortReason::new("stop")) });
        d.watch(d.signal().aborted()).await;
        assert!(d.aborted());
        assert!(!d.timed_out());
        assert_eq!(d.signal().reason().map(|r| r.message.as_str()), Some("stop"));
    }

    #[tokio::test]
    async fn a_caller_signal_that_fired_before_fires_the_deadline_at_once() {
        let caller = AbortSignal::new();
        caller.abort(AbortReason::new("early"));
        let d = Deadline::new(Some(&caller), 10_000.0, "BASH_TIMEOUT").expect("in range");
        assert!(d.aborted());
        assert_eq!(d.watch(async { 7 }).await, 7, "the work still runs to its end");
    }

    /// The work is never cut short: it runs on after the deadline fired and its output is
    /// what `watch` returns.
    #[tokio::test]
    async fn watch_returns_the_work_output_after_the_deadline_fired() {
        let d = Deadline::new(None, 5.0, "BASH_TIMEOUT").expect("in range");
        let out = d
            .watch(async {
                d.signal().aborted().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                "wound down"
            })
            .await;
        assert_eq!(out, "wound down");
        assert!(d.timed_out());
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

    /// A finished call's deadline keeps nothing alive: dropping it releases the caller's
    /// signal and the fused one (a never-fired caller signal is the per-call case of every
    /// MCP call), and no task was ever spawned for it.
    #[tokio::test]
    async fn a_dropped_deadline_releases_both_signals() {
        let caller = AbortSignal::new();
        let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let d = Deadline::new(Some(&caller), 60_000.0, "BASH_TIMEOUT").expect("in range");
        assert_eq!(d.watch(async { 1 }).await, 1);
        let fused = std::sync::Arc::downgrade(&d.signal().inner);
        assert_eq!(tokio::runtime::Handle::current().metrics().num_alive_tasks(), tasks, "no task");
        assert_eq!(std::sync::Arc::strong_count(&caller.inner), 2, "the deadline holds the caller");
        drop(d);
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
