//! End-to-end tests of the built `dsh-bash` binary.

mod bash;
mod batch;
mod call;
mod composition;
mod escalation_hint;
mod first_hour;
mod harness;
mod harness_writes_fds;
mod harness_writes_session_log;
mod harness_writes_support;
mod harness_writes_workspace;
mod killed_harness;
mod mcp;
mod messages;
mod progress;
mod redaction;
mod sandbox;
mod schema;
mod security_env;
mod security_http;
mod security_proc;
mod stress;
mod world;
