//! The harness side: the askpass directory, and one socket per running call.
//!
//! The directory is made by the harness in the system's temporary directory, mode `0711`
//! (enterable, not listable), and holds `bin/` with the link to the program, and a directory
//! per session (`s-<hash of its id>`, or `calls` for the calls without one) with the sockets
//! of its calls (mode `0600`, random names), all mode `0711`. Confined commands get `bin/`
//! shared read-only, and their own session's socket directory only: they can run the program
//! and connect to their call's socket, never create, replace or list anything there, nor see
//! another session's sockets (through which they could ask that session's user).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::Secret;
use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::protocol::{GIVEN, MAX_PROMPT, MAX_REASON, REFUSED};
use crate::{PROGRAM_NAME, SOCKET_VARIABLE};

/// How long the program may take to send its prompt.
const PROMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most questions one call may ask; later ones are refused without asking, so a command
/// cannot flood the user with questions.
pub const MAX_QUESTIONS_PER_CALL: usize = 8;

/// Asks the user for a secret on behalf of one call. `Err` is no answer (refused,
/// cancelled, unavailable): the program then gets nothing, and the message, when there is
/// one, says why (the program prints it on its stderr).
pub trait SecretAsker: Send + Sync {
    /// Asks with `prompt`, the command's own (untrusted) words, control characters escaped.
    fn ask(&self, prompt: String) -> BoxFuture<'static, Result<Secret, Option<String>>>;
}

/// Adds a secret to the redaction of command output before the program gets it; an `Err`
/// (the secret could not be added) withholds the secret.
pub type RedactFn = Arc<dyn Fn(&Secret) -> Result<(), String> + Send + Sync>;

/// Shows a session's socket directory read-only to that session's confined commands only
/// (`None`: the calls without a session).
pub type ShareFn = Arc<dyn Fn(Option<&str>, &Path) + Send + Sync>;

/// The askpass directory and what every call's socket shares.
pub struct AskpassService {
    dir: tempfile::TempDir,
    program: PathBuf,
    redact: Option<RedactFn>,
    share: Option<ShareFn>,
}

impl std::fmt::Debug for AskpassService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AskpassService").field("dir", &self.dir.path()).finish_non_exhaustive()
    }
}

impl AskpassService {
    /// Makes the directory and its link `dsh-askpass` → `executable` (a binary that runs
    /// [`crate::client::run`] when invoked under that name). `redact` is told each secret
    /// before the program gets it.
    pub fn new(executable: &Path, redact: Option<RedactFn>) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("dsh-askpass-").tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        let canonical = std::fs::canonicalize(dir.path())?;
        make_dir(&canonical.join("bin"))?;
        let program = canonical.join("bin").join(PROGRAM_NAME);
        std::os::unix::fs::symlink(executable, &program)?;
        Ok(Self { dir, program, redact, share: None })
    }

    /// Has `share` show each session's socket directory to that session's confined commands
    /// (before its first call's command starts).
    pub fn share_each_session_with(&mut self, share: ShareFn) {
        self.share = Some(share);
    }

    /// The program's directory (canonical): share it read-only with confined commands.
    pub fn dir(&self) -> &Path {
        self.program.parent().unwrap_or_else(|| self.dir.path())
    }

    /// The program's path, as the askpass variables name it.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Opens a socket for one call without a session whose prompts go to `asker` (see
    /// [`AskpassService::open_in_session`]).
    pub fn open(&self, asker: Arc<dyn SecretAsker>) -> std::io::Result<AskpassCall> {
        self.open_in_session(None, asker)
    }

    /// Opens a socket for one call of `session` whose prompts go to `asker`, in the
    /// session's own directory (made, and shared with the session's confined commands, on
    /// first use); it is served until the returned [`AskpassCall`] is dropped. Must be called
    /// inside a tokio runtime.
    pub fn open_in_session(
        &self,
        session: Option<&str>,
        asker: Arc<dyn SecretAsker>,
    ) -> std::io::Result<AskpassCall> {
        let sockets = self.session_dir(session)?;
        if let Some(share) = &self.share {
            share(session, &sockets);
        }
        let name = format!("{}.sock", uuid::Uuid::new_v4().simple());
        let socket = sockets.join(name);
        let listener = UnixListener::bind(&socket)?;
        let mut call = AskpassCall { socket: socket.clone(), task: None, env: env(&self.program, &socket) };
        // `call` removes the socket again if this fails.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        let task = tokio::spawn(serve(listener, asker, self.redact.clone()));
        call.task = Some(task.abort_handle());
        Ok(call)
    }
}

impl AskpassService {
    /// The directory of `session`'s sockets, made if missing.
    fn session_dir(&self, session: Option<&str>) -> std::io::Result<PathBuf> {
        use std::hash::{Hash, Hasher};
        let name = match session {
            Some(id) => {
                let mut hasher = std::hash::DefaultHasher::new();
                id.hash(&mut hasher);
                format!("s-{:016x}", hasher.finish())
            }
            None => "calls".to_owned(),
        };
        let top = self.dir().parent().unwrap_or_else(|| self.dir.path());
        let dir = top.join(name);
        if !dir.is_dir() {
            make_dir(&dir)?;
        }
        Ok(dir)
    }
}

/// Makes `path` with mode `0711` (enterable, not listable); one that exists already is kept.
fn make_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o711).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o711)),
    }
}

/// The variables a command gets for `program` and `socket`.
fn env(program: &Path, socket: &Path) -> BTreeMap<String, String> {
    let program = program.to_string_lossy().into_owned();
    BTreeMap::from([
        ("SUDO_ASKPASS".to_owned(), program.clone()),
        ("SSH_ASKPASS".to_owned(), program.clone()),
        ("SSH_ASKPASS_REQUIRE".to_owned(), "force".to_owned()),
        ("GIT_ASKPASS".to_owned(), program),
        (SOCKET_VARIABLE.to_owned(), socket.to_string_lossy().into_owned()),
    ])
}

/// One call's socket, served while this lives; dropping it stops serving (an answer still
/// being asked is abandoned, the program gets nothing) and removes the socket.
#[derive(Debug)]
pub struct AskpassCall {
    socket: PathBuf,
    task: Option<tokio::task::AbortHandle>,
    env: BTreeMap<String, String>,
}

impl AskpassCall {
    /// The variables the call's command gets: `SUDO_ASKPASS`, `SSH_ASKPASS`, `GIT_ASKPASS`
    /// (the program), `SSH_ASKPASS_REQUIRE=force` and `DSH_ASKPASS_SOCKET` (the socket).
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }
}

impl Drop for AskpassCall {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Accepts the program's connections; questions are asked one at a time, at most
/// [`MAX_QUESTIONS_PER_CALL`] of them. Aborting this task abandons the ones in flight.
async fn serve(listener: UnixListener, asker: Arc<dyn SecretAsker>, redact: Option<RedactFn>) {
    let turn = Arc::new(tokio::sync::Mutex::new(0usize));
    let mut handlers = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    handlers.spawn(answer(stream, Arc::clone(&asker), redact.clone(), Arc::clone(&turn)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "askpass socket stopped accepting");
                    return;
                }
            },
            Some(_) = handlers.join_next(), if !handlers.is_empty() => {}
        }
    }
}

/// One question: read the prompt, ask, answer.
async fn answer(
    mut stream: UnixStream,
    asker: Arc<dyn SecretAsker>,
    redact: Option<RedactFn>,
    turn: Arc<tokio::sync::Mutex<usize>>,
) {
    let mut prompt = Vec::new();
    let mut limited = (&mut stream).take(MAX_PROMPT as u64);
    let read = tokio::time::timeout(PROMPT_TIMEOUT, limited.read_to_end(&mut prompt)).await;
    if !matches!(read, Ok(Ok(_))) {
        let _ = stream.write_all(&[REFUSED]).await;
        return;
    }
    let prompt = printable(&String::from_utf8_lossy(&prompt));
    let secret = {
        let mut asked = turn.lock().await;
        if *asked >= MAX_QUESTIONS_PER_CALL {
            Err(Some(format!("this command already asked {MAX_QUESTIONS_PER_CALL} questions")))
        } else {
            *asked += 1;
            asker.ask(prompt).await
        }
    };
    let secret = secret.and_then(|secret| match &redact {
        None => Ok(secret),
        Some(redact) => match redact(&secret) {
            Ok(()) => Ok(secret),
            Err(e) => {
                tracing::warn!(error = %e, "askpass answer withheld: cannot redact it");
                Err(None)
            }
        },
    });
    let mut reply = match &secret {
        Ok(secret) => [&[GIVEN][..], secret.expose()].concat(),
        Err(why) => {
            let why = why.as_deref().map(printable).unwrap_or_default();
            let mut end = why.len().min(MAX_REASON);
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            [&[REFUSED][..], &why.as_bytes()[..end]].concat()
        }
    };
    let _ = stream.write_all(&reply).await;
    let _ = stream.shutdown().await;
    reply.fill(0);
}

/// The prompt with control characters escaped (`\n`, `\u{1b}`), so it shows as one line of
/// text whatever the command sent.
fn printable(prompt: &str) -> String {
    prompt
        .chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers with a fixed secret (or none), counting questions and keeping their prompts.
    struct Fixed(Option<&'static str>, Arc<AtomicUsize>, Arc<std::sync::Mutex<Vec<String>>>);

    impl SecretAsker for Fixed {
        fn ask(&self, prompt: String) -> BoxFuture<'static, Result<Secret, Option<String>>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.2.lock().expect("prompts").push(prompt);
            let answer = self.0.map(|s| Secret::new(s.as_bytes())).ok_or(None);
            Box::pin(async move { answer })
        }
    }

    fn client(socket: &Path, prompt: &str) -> (u8, Vec<u8>) {
        // The program's exchange, without its stdout: the socket protocol alone.
        let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
        use std::io::{Read, Write};
        stream.write_all(prompt.as_bytes()).expect("prompt");
        stream.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("answer");
        (answer[0], answer[1..].to_vec())
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_prompt_gets_the_askers_secret_and_it_is_redacted_first() {
        let redacted = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&redacted);
        let redact: RedactFn = Arc::new(move |s: &Secret| {
            seen.lock().expect("seen").push(s.expose().to_vec());
            Ok(())
        });
        let service = AskpassService::new(Path::new("/bin/true"), Some(redact)).expect("service");
        let prompts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let asker =
            Arc::new(Fixed(Some("hunter2-long"), Arc::new(AtomicUsize::new(0)), Arc::clone(&prompts)));
        let call = service.open(asker).expect("open");
        let socket = PathBuf::from(&call.env()[SOCKET_VARIABLE]);
        let mode = std::fs::metadata(&socket).expect("socket").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(service.dir()).expect("dir").permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o711);
        let answer = tokio::task::spawn_blocking(move || client(&socket, "Password\n\x1b[2J: "))
            .await
            .expect("client");
        assert_eq!(answer, (GIVEN, b"hunter2-long".to_vec()));
        assert_eq!(*redacted.lock().expect("redacted"), [b"hunter2-long".to_vec()]);
        assert_eq!(*prompts.lock().expect("prompts"), ["Password\\n\\u{1b}[2J: "]);
        assert_eq!(call.env()["SUDO_ASKPASS"], service.program().to_string_lossy());
        assert_eq!(call.env()["GIT_ASKPASS"], call.env()["SSH_ASKPASS"]);
        assert_eq!(call.env()["SSH_ASKPASS_REQUIRE"], "force");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn no_answer_is_refused_and_a_closed_call_removes_its_socket() {
        let service = AskpassService::new(Path::new("/bin/true"), None).expect("service");
        let asked = Arc::new(AtomicUsize::new(0));
        let asker = Arc::new(Fixed(None, Arc::clone(&asked), Arc::default()));
        let call = service.open(asker).expect("open");
        let socket = PathBuf::from(&call.env()[SOCKET_VARIABLE]);
        let path = socket.clone();
        let answer = tokio::task::spawn_blocking(move || client(&path, "Password: ")).await.expect("client");
        assert_eq!(answer, (REFUSED, Vec::new()));
        drop(call);
        assert!(!socket.exists(), "the socket is removed with its call");
        let code = tokio::task::spawn_blocking(move || {
            crate::client::run([OsString::from("Password: ")], Some(socket.into_os_string()))
        })
        .await
        .expect("client");
        assert_eq!(code, 1, "a stale socket fails at once");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_call_asks_at_most_its_quota_of_questions() {
        let service = AskpassService::new(Path::new("/bin/true"), None).expect("service");
        let asked = Arc::new(AtomicUsize::new(0));
        let asker = Arc::new(Fixed(Some("pw"), Arc::clone(&asked), Arc::default()));
        let call = service.open(asker).expect("open");
        let socket = PathBuf::from(&call.env()[SOCKET_VARIABLE]);
        let answers = tokio::task::spawn_blocking(move || {
            (0..MAX_QUESTIONS_PER_CALL + 2).map(|_| client(&socket, "again: ").0).collect::<Vec<_>>()
        })
        .await
        .expect("client");
        let given = answers.iter().filter(|a| **a == GIVEN).count();
        assert_eq!((given, asked.load(Ordering::SeqCst)), (MAX_QUESTIONS_PER_CALL, MAX_QUESTIONS_PER_CALL));
    }
}
