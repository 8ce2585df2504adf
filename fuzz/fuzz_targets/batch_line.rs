//! Fuzzes the `dsh-bash batch` line parser: any bytes must parse or be refused, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = dsh_bash::batch_line::parse_bytes(data) {
        assert!(e.message.starts_with("invalid JSON: ") || e.message.starts_with("invalid request: "));
    }
});
