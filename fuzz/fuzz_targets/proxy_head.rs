//! Fuzzes the network proxy's request-head parser: any bytes must be parsed or refused with a
//! 400, never panic, parse the same way twice, and a plain-HTTP request it forwards must be a
//! whole, well-formed head in origin form without the proxy's own headers (see
//! `assert_invariants` in the parser's file).
#![no_main]

use libfuzzer_sys::fuzz_target;

// The parser's own source, compiled here with only `httparse`, so the fuzz build does not pull
// in the proxy's runtime and TLS.
#[path = "../../crates/dsh-netproxy/src/head.rs"]
#[allow(dead_code)]
mod head;

fuzz_target!(|data: &[u8]| head::assert_invariants(data));
