//! Plugin glue for crates that expose constructors but no [`dsh_core::Plugin`] of their own:
//! the subprocess service, the local executor and the local sandbox provider. Kept thin:
//! config in, service out.

mod bash_local;
#[cfg(target_os = "linux")]
mod sandbox_local;
mod subprocess;

pub use bash_local::BashLocalPlugin;
#[cfg(target_os = "linux")]
pub use sandbox_local::SandboxLocalPlugin;
pub use subprocess::SubprocessPlugin;
