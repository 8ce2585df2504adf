//! Subprocess mechanics (a **mechanics** crate under the executors).
//!
//! [`SubprocessService`] starts children in their own process groups (or, on request, their
//! own sessions, without a controlling terminal), never hands them a descriptor the harness
//! inherited, collects each output stream into a bounded tail with an optional spill file
//! ([`OutputCollector`]; a running process's latest output line can be peeked at cheaply
//! with [`ProcessHandle::latest_output_line`]), scrubs credentials and stale `DSH_*` values
//! from the inherited environment (and, with a [`Redactor`], replaces their values in collected
//! output by `[redacted:NAME]`), terminates process trees with `SIGTERM` → grace →
//! `SIGKILL`, and owns every tree until it is gone. With [`Containment::Subreaper`] (the
//! default, Linux) nothing a tree starts outlives it: what is left of a group dies with its
//! leader, and `setsid`/double-forked strays are adopted and killed (opt out with
//! `DSH_DETACH=1` in a `setsid` process's environment).
//!
//! It knows nothing about bash, the shell executor seam, sandboxes (a sandbox only hands it a
//! [`PreExecHook`]) or any tool or host. Linux is the supported platform.

#![deny(missing_docs)]

pub mod child_exec;
mod collector;
mod containment;
mod direct;
mod env;
mod error;
mod exit_guard;
mod fds;
mod grouped;
mod guardian;
mod handle;
mod latest_line;
mod limits;
#[cfg(feature = "plugin")]
pub mod plugin;
#[cfg(feature = "plugin")]
mod plugin_key;
mod program;
mod pty;
mod redact;
mod retention;
mod service;
mod signal_name;
mod spawn;
mod spill;
mod tree;
mod utf8;

pub use collector::{
    CaptureLimits, CollectedStream, OutputCollector, SPILL_DIR_FULL, SPILL_REMOVED, SpillPathObserver,
    StreamRead, TailPeek,
};
pub use containment::{Containment, ContainmentStatus, DETACH_ENV};
pub use env::{AmbientEnv, EnvEntry, is_credential, is_scrubbed};
pub use error::{OsSpawnError, SpawnError, SpawnStage};
pub use grouped::GroupedChild;
pub use guardian::guardian_pid;
pub use handle::{ProcessHandle, ProcessOutcome};
pub use latest_line::{LATEST_LINE_MAX_CHARS, LATEST_LINE_WINDOW, latest_line, latest_output_line};
pub use limits::{Enforcement, ResourceLimits, ResourceUsage, enforcement};
pub use nix::errno::Errno;
#[cfg(feature = "plugin")]
pub use plugin::{SubprocessConfig, SubprocessPlugin};
#[cfg(feature = "plugin")]
pub use plugin_key::{SUBPROCESS, SUBPROCESS_SERVICE};
pub use pty::PtySize;
pub use redact::{REDACT_MIN_LEN, RedactStream, Redactor, RedactorError, SharedRedactor, redaction_marker};
pub use retention::{DEFAULT_SPILL_SESSION_QUOTA, DEFAULT_SPILL_TOTAL_CAP, SpillRetention, parse_size};
pub use service::{ServiceOptions, SubprocessService};
pub use signal_name::{signal_name, signal_number};
pub use spawn::{MAX_GRACE, PreExecHook, SpawnSpec};
pub use spill::{
    DEFAULT_SPILL_MAX_AGE, DefaultSpillNamer, SPILL_MAX_AGE_ENV, SpillNamer, remove_stale_spill_dirs,
    spill_max_age,
};
pub use tree::group_has_live_member;
