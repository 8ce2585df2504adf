//! Fuzzes the `dsh-bash batch` line parser: any bytes must parse or be refused with one of the
//! documented message prefixes, never panic, and parse the same way twice.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The parser's own source, compiled here with only its two dependencies, so the fuzz build
// does not pull in the whole host (runtime, MCP server, sandbox).
#[path = "../../crates/dsh-bash/src/batch_line.rs"]
#[allow(dead_code)]
mod batch_line;

fuzz_target!(|data: &[u8]| {
    let first = batch_line::parse_bytes(data);
    match &first {
        Ok(request) => assert!(request.cwd.is_none() || request.session.is_some(), "cwd requires session"),
        Err(e) => {
            assert!(e.message.starts_with("invalid JSON: ") || e.message.starts_with("invalid request: "))
        }
    }
    assert_eq!(first, batch_line::parse_bytes(data), "parsing is deterministic");
});
