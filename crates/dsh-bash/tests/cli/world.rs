//! "A confined command lives in its own world": the built binary runs commands under
//! `--sandbox workspace-write` and each test checks, from inside and from the host, that the
//! command cannot reach anything of the host beyond its files (terminal, sockets, devices,
//! processes, capabilities, dangerous syscalls, the host's `/tmp`, files other programs trust),
//! and that everyday tools still work in that world.
//!
//! Every test runs over the matrix {landlock, bwrap} × {root, nobody} (see [`matrix`]) and
//! reports every failing cell at once. A runner this host cannot start is skipped with the
//! reason printed, unless `DSH_SANDBOX_REQUIRE_RUNNERS` names it (CI), which fails instead; a
//! missing everyday tool is skipped, or fails when `CI=true`.

mod approvals;
mod askpass;
mod audit;
mod autorun;
mod cell;
mod credentials;
mod devices;
mod everyday;
mod files;
mod grants;
mod harness;
mod host;
mod host_changes;
mod host_kernel;
mod interactive;
mod ipc;
mod limits;
mod matrix;

pub(crate) use matrix::beside_host_load;
mod network;
mod privileges;
mod processes;
mod secrets;
mod sessions;
mod signals;
mod toolchains;
mod worktrees;
