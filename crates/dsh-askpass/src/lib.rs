//! Secrets asked of the user, never of the model (askpass).
//!
//! Programs that need a password and have no terminal ask an *askpass program*: `sudo -A`
//! runs `$SUDO_ASKPASS`, ssh runs `$SSH_ASKPASS` (with `SSH_ASKPASS_REQUIRE=force`, also
//! without a display), git runs `$GIT_ASKPASS`, each with the prompt as its one argument, and
//! read the answer from its stdout. This crate provides both sides:
//!
//! * [`client`]: the askpass program. The host's binary runs it when invoked under the name
//!   [`PROGRAM_NAME`]: it sends the prompt over the unix socket named by
//!   [`SOCKET_VARIABLE`] and prints the answer, or prints nothing and exits 1 at once when
//!   there is none.
//! * [`AskpassService`]: the harness side. A directory commands cannot write holds a link to
//!   the program and, in a directory per session, one socket per running call
//!   ([`AskpassService::open_in_session`]); each prompt
//!   goes to that call's [`SecretAsker`] (the approval service, for the call's agent), and
//!   the answer is added to the output redaction before the program gets it.
//!
//! The secret never passes through the model, the command's collected output (a command that
//! prints it shows `[redacted:askpass]`), the logs or the session log. It knows nothing about
//! the bash tool or how answers are obtained.

#![deny(missing_docs)]

pub mod client;
mod plugin;
mod protocol;
mod server;

pub use plugin::{ASKPASS, AskpassConfig, AskpassPlugin};
pub use server::{AskpassCall, AskpassService, RedactFn, SecretAsker, ShareFn};

/// The name the askpass program is invoked under (the link's file name).
pub const PROGRAM_NAME: &str = "dsh-askpass";

/// The environment variable naming the call's socket.
pub const SOCKET_VARIABLE: &str = "DSH_ASKPASS_SOCKET";

/// The name answers are redacted under: `[redacted:askpass]`.
pub const REDACTION_NAME: &str = "askpass";
