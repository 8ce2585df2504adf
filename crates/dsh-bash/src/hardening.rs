//! What the harness does to itself at start so that the commands it runs, which run as the
//! same user, cannot read its secrets (the HTTP bearer token above all: with it a command
//! could open its own MCP session and answer its own approval requests).
//!
//! * The process is made non-dumpable: the kernel then lets only a `CAP_SYS_PTRACE` holder
//!   read its `/proc/<pid>/environ`, `mem` or `fd`, or attach a debugger, and writes no core
//!   file. A forked child stays non-dumpable only until it executes a program, so commands
//!   themselves are ordinary processes.
//! * `$DSH_MCP_TOKEN` is taken out of the environment before anything else starts, and its
//!   value is wiped from the block `/proc/<pid>/environ` shows (that block is the one the
//!   process started with; removing the variable alone leaves it there).

use std::ffi::OsString;

/// Makes this process non-dumpable (Linux; elsewhere nothing to do).
pub fn forbid_inspection() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments only; it reads or writes no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The value of `name`, after removing it from the environment and wiping the value from
/// the environment block in place.
///
/// # Safety
///
/// No other thread may exist: the environment is changed without the locks that other
/// readers (in Rust or C) would take.
pub unsafe fn take_env_var(name: &str) -> Option<OsString> {
    let value = std::env::var_os(name)?;
    #[cfg(target_os = "linux")]
    // SAFETY: the caller guarantees no other thread exists.
    unsafe {
        wipe_values(name)
    };
    // SAFETY: the caller guarantees no other thread exists.
    unsafe { std::env::remove_var(name) };
    Some(value)
}

/// Overwrites with NUL bytes the value of every `name=value` entry of `environ`.
///
/// # Safety
///
/// No other thread may exist.
#[cfg(target_os = "linux")]
unsafe fn wipe_values(name: &str) {
    unsafe extern "C" {
        static environ: *const *mut libc::c_char;
    }
    let prefix = format!("{name}=");
    // SAFETY: `environ` is the C library's environment array: null, or null-terminated
    // pointers to NUL-terminated strings that are writable (the block the kernel put on the
    // stack, or heap copies made by setenv). No other thread can change it meanwhile.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let text = *entry;
            let bytes = std::ffi::CStr::from_ptr(text).to_bytes();
            if bytes.starts_with(prefix.as_bytes()) {
                for i in prefix.len()..bytes.len() {
                    text.add(i).write_volatile(0);
                }
            }
            entry = entry.add(1);
        }
    }
}
