//! The container executor (a **provider** of the `shell` seam, plugin `shell-container`).
//!
//! [`ContainerTransport`] is a [`dsh_shell_remote::RemoteTransport`] over the Docker Engine
//! API (`bollard`; Podman through its Docker-compatible service): one container per session,
//! created on first use from an image (or an existing container named by config), the
//! workspace and the session's roots bind-mounted at their own paths, memory/CPU/process limits and `network none`
//! from config, removed at teardown. The executor itself is
//! [`dsh_shell_remote::RemoteExecutor`]: everything the `shell` contract promises is built
//! there, once, for every transport.

#![deny(missing_docs)]

mod config;
mod labels;
mod plugin;
mod transport;

pub use config::{ContainerExecutorConfig, parse_memory};
pub use labels::{HARNESS_LABEL, HOST_LABEL, SESSION_LABEL};
pub use plugin::ShellContainerPlugin;
pub use transport::{ContainerSettings, ContainerTransport};
