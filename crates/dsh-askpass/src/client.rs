//! The askpass program: one prompt in, the answer (and `\n`) on stdout, exit 0; no answer,
//! nothing on stdout and exit 1, at once (with why on stderr, when the harness says why).
//!
//! It runs as a child of the asking program (sudo, ssh, git), whose pipe is its stdout. It
//! uses blocking standard-library calls only: no runtime, no threads.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::protocol::{GIVEN, MAX_ANSWER, MAX_PROMPT, MAX_REASON, REFUSED};
use crate::{PROGRAM_NAME, SOCKET_VARIABLE};

/// Whether a process invoked as `argv0` is the askpass program (its file name is
/// [`PROGRAM_NAME`]).
pub fn invoked_as_askpass(argv0: &std::ffi::OsStr) -> bool {
    Path::new(argv0).file_name().is_some_and(|name| name == PROGRAM_NAME)
}

/// Runs the program: `args` are its arguments after `argv[0]` (the prompt, when given),
/// `socket` the value of [`SOCKET_VARIABLE`]. Returns the exit code.
pub fn run(args: impl IntoIterator<Item = OsString>, socket: Option<OsString>) -> u8 {
    let prompt = args.into_iter().next().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(socket) = socket.filter(|s| !s.is_empty()) else {
        eprintln!("{PROGRAM_NAME}: {SOCKET_VARIABLE} is not set: no one to ask");
        return 1;
    };
    match ask(Path::new(&socket), &prompt) {
        Ok(Ok(mut secret)) => {
            secret.push(b'\n');
            let mut out = std::io::stdout().lock();
            let written = out.write_all(&secret).and_then(|()| out.flush());
            secret.fill(0);
            u8::from(written.is_err())
        }
        Ok(Err(why)) => {
            if !why.is_empty() {
                eprintln!("{PROGRAM_NAME}: no secret: {why}");
            }
            1
        }
        Err(e) => {
            eprintln!("{PROGRAM_NAME}: cannot ask: {e}");
            1
        }
    }
}

/// One exchange: the secret, or why the harness refused (possibly nothing).
fn ask(socket: &Path, prompt: &str) -> std::io::Result<Result<Vec<u8>, String>> {
    let mut stream = UnixStream::connect(socket)?;
    let bytes = prompt.as_bytes();
    stream.write_all(&bytes[..bytes.len().min(MAX_PROMPT)])?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = Vec::new();
    stream.take(MAX_ANSWER as u64 + 1).read_to_end(&mut answer)?;
    if answer.first() == Some(&REFUSED) {
        let why = &answer[1..answer.len().min(1 + MAX_REASON)];
        // The harness's words, one line of printable text whatever arrived.
        let why = String::from_utf8_lossy(why).chars().filter(|c| !c.is_control()).collect();
        return Ok(Err(why));
    }
    if answer.first() != Some(&GIVEN) || answer.len() > MAX_ANSWER {
        answer.fill(0);
        return Ok(Err(String::new()));
    }
    let secret = answer[1..].to_vec();
    answer.fill(0);
    Ok(Ok(secret))
}
