//! `dsh-bash` as a library: the `bash` tool and its services composed and called from Rust.
//!
//! Start with [`Harness`] (see [`harness`] for worked examples). The modules below are what
//! the `dsh-bash` binary is built from: the command-line options ([`cli`]), the plugins it
//! knows ([`catalog`]), how a composition is planned from options and a TOML file ([`plan`],
//! [`config`]) and started ([`composition`]), sessions ([`sessions`]) and one call as a host
//! makes it ([`request`]). [`batch_line`] parses `batch` input lines on its own, so it can be
//! property-tested and fuzzed without starting a composition.

#![deny(missing_docs)]

pub mod batch_line;
pub mod catalog;
pub mod cli;
pub mod composition;
pub mod config;
pub mod harness;
pub mod plan;
pub mod request;
pub mod sessions;

pub use harness::{Approve, CallOutcome, Harness, HarnessBuilder, SandboxMode};
