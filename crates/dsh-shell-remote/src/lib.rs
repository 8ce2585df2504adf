//! Executors that run `bash -c` somewhere other than the harness's host — in a container, on
//! an SSH host — with the tool, the jobs, the notices and the approvals unchanged.
//!
//! A [`RemoteTransport`] only starts a program on the far side and hands back its streams
//! and its exit; everything the `shell` contract promises on top of that (the `DSH_*`
//! environment, tail-bounded capture with a spill file on the harness's side, timeouts with
//! TERM→KILL of the whole remote tree, no survivors, exit facts, background processes) is
//! built once, here, over any transport.

mod transport;

pub use transport::{RemoteChild, RemoteError, RemoteExecSpec, RemoteExit, RemoteTransport};
