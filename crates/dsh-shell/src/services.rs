//! This crate's services as types, for plugins' [`dsh_core::Plugin::Deps`].

use std::sync::Arc;

use dsh_core::{Service, ServiceKey};

use crate::env::{SHELL_ENV, ShellEnvRegistry};
use crate::exec::{SHELL, ShellExecutor};

/// `shell`: the mounted bash executor.
pub struct Shell;

impl Service for Shell {
    const NAME: &'static str = SHELL.name();
    type Handle = Arc<dyn ShellExecutor>;
}

/// `shellEnv`: the managed `DSH_*` environment registry.
pub struct ShellEnv;

impl Service for ShellEnv {
    const NAME: &'static str = SHELL_ENV.name();
    type Handle = Arc<ShellEnvRegistry>;
}

// The markers' handles are the keys' value types.
const _: ServiceKey<<Shell as Service>::Handle> = SHELL;
const _: ServiceKey<<ShellEnv as Service>::Handle> = SHELL_ENV;
