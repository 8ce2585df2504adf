//! Plugin glue for crates that expose constructors but no [`dsh_core::Plugin`] of their own:
//! the subprocess service and the local executor. Kept thin: config in, service out.

mod bash_local;
mod subprocess;

pub use bash_local::BashLocalPlugin;
pub use subprocess::SubprocessPlugin;
