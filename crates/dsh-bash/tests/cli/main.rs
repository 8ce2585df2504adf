//! End-to-end tests of the built `dsh-bash` binary.

mod bash;
mod batch;
mod call;
mod composition;
mod harness;
mod mcp;
mod sandbox;
mod schema;
