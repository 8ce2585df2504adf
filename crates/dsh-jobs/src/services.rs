//! This crate's service as a type, for plugins' [`dsh_core::Plugin::Deps`].

use std::sync::Arc;

use dsh_core::{Service, ServiceKey};

use crate::registry::{JOBS, JobRegistry};

/// `jobs`: the background job registry.
pub struct Jobs;

impl Service for Jobs {
    const NAME: &'static str = JOBS.name();
    type Handle = Arc<dyn JobRegistry>;
}

// The marker's handle is the key's value type.
const _: ServiceKey<<Jobs as Service>::Handle> = JOBS;
