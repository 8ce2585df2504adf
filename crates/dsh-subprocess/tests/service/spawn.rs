use std::os::unix::fs::PermissionsExt;

use std::time::Duration;

use dsh_subprocess::{
    Errno, MAX_GRACE, OsSpawnError, PreExecHook, SpawnError, SpawnSpec, SpawnStage, SubprocessService,
};
use tokio_util::sync::CancellationToken;

use crate::bash;

fn os_error(err: SpawnError) -> OsSpawnError {
    match err {
        SpawnError::Os(e) => e,
        other => panic!("expected an OS spawn error, got {other:?}"),
    }
}

#[tokio::test]
async fn sp_01_grace_validation() {
    let service = SubprocessService::new();
    for grace in [Duration::ZERO, MAX_GRACE + Duration::from_nanos(1), Duration::MAX] {
        let mut spec = bash("echo never");
        spec.grace = grace;
        let err = service.spawn(spec).expect_err("invalid grace");
        assert_eq!(
            err.to_string(),
            "subprocess graceMs must be a positive finite number no greater than 2147483647",
            "grace {grace:?}"
        );
    }
    assert_eq!(service.live_count(), 0, "nothing was spawned");
    let mut spec = bash("true");
    spec.grace = Duration::from_millis(2_147_483_647);
    assert_eq!(service.spawn(spec).expect("max grace is valid").wait().await.exit_code, Some(0));
}

#[tokio::test]
async fn sp_02_spawn_preconditions() {
    let service = SubprocessService::new();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let mut spec = bash("echo never");
    spec.cancel = Some(cancel);
    assert_eq!(service.spawn(spec).expect_err("pre-cancelled"), SpawnError::CancelledBeforeSpawn);

    for argv in [vec![], vec![String::new()]] {
        let err = service.spawn(SpawnSpec::new(argv)).expect_err("bad argv");
        assert_eq!(err.to_string(), "invalid argv: expected a non-empty program name at argv[0]");
    }

    let mut spec = bash("true");
    spec.cwd = Some("/nonexistent-dsh".into());
    let err = os_error(service.spawn(spec).expect_err("missing cwd"));
    assert_eq!(err.to_string(), "spawn bash ENOENT: working directory /nonexistent-dsh does not exist");
    assert_eq!((err.code().as_str(), err.stage), ("ENOENT", SpawnStage::Cwd));
}

#[tokio::test]
async fn spawn_failures_tell_the_working_directory_from_the_program() {
    let service = SubprocessService::new();
    let dir = tempfile::tempdir().expect("tempdir");

    let file = dir.path().join("plain-file");
    std::fs::write(&file, "data").expect("write");
    let mut spec = bash("true");
    spec.cwd = Some(file.clone());
    let err = os_error(service.spawn(spec).expect_err("cwd is a file"));
    assert_eq!((err.errno, err.stage), (Errno::ENOTDIR, SpawnStage::Cwd));

    let err =
        os_error(service.spawn(SpawnSpec::new(vec!["no-such-program-dsh".into()])).expect_err("missing"));
    assert_eq!(err.to_string(), "spawn no-such-program-dsh ENOENT");
    assert_eq!(err.stage, SpawnStage::Exec);

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let program = file.display().to_string();
    let err = os_error(service.spawn(SpawnSpec::new(vec![program.clone()])).expect_err("not executable"));
    assert_eq!(err.to_string(), format!("spawn {program} EACCES"));
    assert_eq!(err.stage, SpawnStage::Exec);

    let script = dir.path().join("bad-shebang");
    crate::write_script(&script, "#!/nonexistent/interpreter\n");
    let mut spec = SpawnSpec::new(vec![script.display().to_string()]);
    spec.cwd = Some(dir.path().to_path_buf());
    let err = os_error(service.spawn(spec).expect_err("missing interpreter"));
    assert_eq!((err.errno, err.stage), (Errno::ENOENT, SpawnStage::Exec));
}

#[tokio::test]
async fn sp_07_stdin() {
    let service = SubprocessService::new();
    let mut spec = SpawnSpec::new(vec!["cat".into()]);
    spec.stdin = Some(b"hello from stdin\n".to_vec());
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "hello from stdin\n");

    let handle = service.spawn(SpawnSpec::new(vec!["cat".into()])).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0), "no stdin is EOF");
    assert_eq!(handle.stdout().collected().text, "");

    let mut spec = bash("exit 7");
    spec.stdin = Some(vec![b'x'; 1 << 20]);
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(7), "EPIPE on stdin is ignored");
}

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let service = SubprocessService::new();
    let handle = service.spawn(bash("printf out; printf err >&2; exit 3")).expect("spawn");
    let outcome = handle.wait().await;
    assert_eq!((outcome.exit_code, outcome.signal), (Some(3), None));
    assert_eq!(handle.stdout().collected().text, "out");
    assert_eq!(handle.stderr().collected().text, "err");

    let handle = service.spawn(bash("kill -USR1 $$")).expect("spawn");
    let outcome = handle.wait().await;
    assert_eq!((outcome.exit_code, outcome.signal.as_deref()), (None, Some("SIGUSR1")));
}

#[tokio::test]
async fn a_pre_exec_hook_runs_in_the_child() {
    let service = SubprocessService::new();
    let mut spec = bash("umask");
    let hook = || {
        // SAFETY: umask has no memory-safety preconditions and only affects the child.
        unsafe { libc::umask(0o027) };
        Ok(())
    };
    // SAFETY: the hook only calls umask(2), which is async-signal-safe.
    unsafe { spec.pre_exec(hook) };
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "0027\n");
}

#[tokio::test]
async fn a_failing_pre_exec_hook_is_its_own_spawn_stage() {
    let service = SubprocessService::new();
    let mut spec = bash("echo never");
    spec.cwd = Some("/".into());
    // SAFETY: the hook only builds an `io::Error` from an errno, which does not allocate.
    unsafe { spec.pre_exec(|| Err(std::io::Error::from_raw_os_error(libc::EPERM))) };
    let err = os_error(service.spawn(spec).expect_err("hook fails"));
    assert_eq!(err.to_string(), "spawn bash EPERM");
    assert_eq!(err.stage, SpawnStage::PreExec);

    // With a hook, an exec failure is still an exec failure.
    let mut spec = SpawnSpec::new(vec!["/nonexistent/runner".into()]);
    // SAFETY: the hook does nothing.
    unsafe { spec.pre_exec(|| Ok(())) };
    let err = os_error(service.spawn(spec).expect_err("exec fails"));
    assert_eq!((err.errno, err.stage), (Errno::ENOENT, SpawnStage::Exec));
}

/// A hook that may share the harness's memory runs in a child started with
/// `clone(CLONE_VM | CLONE_VFORK)` (it sees a published image that shares memory); when it
/// asks for a forked start, the child is started again with a `fork`, where the hook runs
/// once more; its failure and a failed `exec` keep their stages.
#[tokio::test]
async fn a_hook_sharing_memory_runs_in_the_child_or_asks_for_a_fork() {
    use dsh_subprocess::child_exec;
    let service = SubprocessService::new();
    // SAFETY: called in the child, while the spawner's image is published.
    let image = || unsafe { child_exec::current() };
    let shared = move || image().is_some_and(child_exec::ChildExec::shares_memory);
    let runs = |script: &str, hook: PreExecHook| {
        let mut spec = bash(script);
        spec.with_pre_exec(Some(hook));
        spec
    };
    // SAFETY: the hook reads a published image and calls umask(2); it changes nothing of the
    // address space.
    let in_shared = unsafe {
        PreExecHook::new(move || {
            libc::umask(if shared() { 0o027 } else { 0o077 });
            Ok(())
        })
        .sharing_memory()
    };
    let handle = service.spawn(runs("umask", in_shared)).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "0027\n", "the hook ran in a child sharing memory");

    // SAFETY: as above; `want_fork` is one atomic store into the published image.
    let wants_fork = unsafe {
        PreExecHook::new(move || {
            if shared() {
                image().expect("published").want_fork();
                return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
            }
            libc::umask(0o077);
            Ok(())
        })
        .sharing_memory()
    };
    let handle = service.spawn(runs("umask", wants_fork)).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "0077\n", "the hook ran again in a forked child");

    // SAFETY: the hook only builds an `io::Error` from an errno, which does not allocate.
    let failing =
        unsafe { PreExecHook::new(|| Err(std::io::Error::from_raw_os_error(libc::EPERM))).sharing_memory() };
    let err = os_error(service.spawn(runs("echo never", failing)).expect_err("hook fails"));
    assert_eq!((err.errno, err.stage), (Errno::EPERM, SpawnStage::PreExec));
    let mut spec = SpawnSpec::new(vec!["/nonexistent/runner".into()]);
    // SAFETY: the hook does nothing.
    spec.with_pre_exec(Some(unsafe { PreExecHook::new(|| Ok(())).sharing_memory() }));
    let err = os_error(service.spawn(spec).expect_err("exec fails"));
    assert_eq!((err.errno, err.stage), (Errno::ENOENT, SpawnStage::Exec));
}

/// The session id (field 6 of `/proc/<pid>/stat`), the pid, and what opening `/dev/tty` says.
const SESSION_PROBE: &str =
    r#"read -r stat < /proc/$$/stat; set -- ${stat##*) }; echo "$4 $$"; exec 3</dev/tty"#;

async fn session_probe(new_session: bool) -> (u32, u32, String, Option<i32>) {
    let service = SubprocessService::new();
    let mut spec = bash(SESSION_PROBE);
    spec.new_session = new_session;
    let handle = service.spawn(spec).expect("spawn");
    let outcome = handle.wait().await;
    let stdout = handle.stdout().collected().text;
    let mut fields = stdout.split_whitespace().map(|f| f.parse::<u32>().expect("number"));
    let (sid, pid) = (fields.next().expect("sid"), fields.next().expect("pid"));
    assert_eq!(pid, handle.pid(), "bash -c execs in the direct child");
    (sid, pid, handle.stderr().collected().text, outcome.exit_code)
}

#[tokio::test]
async fn new_session_makes_the_child_a_session_leader_without_a_terminal() {
    // While the test's own session has a terminal, the child needs a session of its own to be
    // without one; otherwise a group of its own in this session is the same guarantee.
    let has_terminal = std::fs::File::open("/dev/tty").is_ok();
    let (sid, pid, stderr, code) = session_probe(true).await;
    assert_eq!(sid == pid, has_terminal, "getsid(0) == getpid() iff the harness has a terminal");
    assert_eq!(stderr, "bash: line 1: /dev/tty: No such device or address\n");
    assert_eq!(code, Some(1));

    let (sid, pid, _, _) = session_probe(false).await;
    assert_ne!(sid, pid, "by default the child stays in the harness's session");
}

#[tokio::test]
async fn new_session_keeps_the_process_group_for_termination() {
    let service = SubprocessService::new();
    let mut spec = bash("sleep 300 & echo $!; wait");
    spec.new_session = true;
    let handle = service.spawn(spec).expect("spawn");
    handle.stdout().wait_for_total(2).await;
    let sleeper: i32 = handle.stdout().read_from(0).text.trim().parse().expect("pid");
    let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(sleeper))).expect("pgid");
    assert_eq!(pgid.as_raw() as u32, handle.pid(), "the group is the child's pid");
    handle.terminate();
    handle.wait().await;
    handle.wait_for_exit(None).await;
    assert!(handle.is_tree_gone());
    assert!(!crate::group_has_live_member(handle.pid()));
}

/// A descriptor opened without close-on-exec after the service exists, numbered `>= 3`.
fn leaky_append_fd(path: &std::path::Path) -> std::os::fd::OwnedFd {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open");
    let fd = file.into_raw_fd();
    // SAFETY: clears close-on-exec on a descriptor this test owns (it leaks by design).
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    // SAFETY: `fd` came from `into_raw_fd` just above and is owned by nothing else.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

#[tokio::test]
async fn children_never_inherit_descriptors_from_3() {
    use std::os::fd::AsRawFd;
    let service = SubprocessService::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("target");
    let fd = leaky_append_fd(&target);
    let script = format!("echo leaked >&{}", fd.as_raw_fd());
    // SAFETY: the hook does nothing.
    let hook = unsafe { PreExecHook::new(|| Ok(())) };
    // Forked (a hook), forked or direct (a new session: forked only under a terminal), direct.
    for (hook, new_session) in [(Some(hook), false), (None, true), (None, false)] {
        let mut spec = bash(&script);
        spec.with_pre_exec(hook);
        spec.new_session = new_session;
        let handle = service.spawn(spec).expect("spawn");
        assert_eq!(handle.wait().await.exit_code, Some(1), "new_session {new_session}");
        assert_eq!(
            handle.stderr().collected().text,
            format!("bash: line 1: {}: Bad file descriptor\n", fd.as_raw_fd()),
            "new_session {new_session}"
        );
    }
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "");
}

/// A start with no hook, session or terminal goes through the direct `posix_spawn` path; the
/// child gets what the standard library's start gives: its own process group, an empty
/// signal mask, `SIGPIPE` at its default, the working directory, `/dev/null` or a pipe on
/// stdin, and the ambient environment under the call's own variables.
#[tokio::test]
async fn a_direct_start_gives_the_child_its_group_signals_directory_and_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let service = dsh_subprocess::SubprocessService::with_options(dsh_subprocess::ServiceOptions {
        ambient_env: crate::ambient_with(&[
            ("KEPT", "ambient"),
            ("REPLACED", "ambient"),
            ("GONE", "ambient"),
        ]),
        ..dsh_subprocess::ServiceOptions::default()
    });
    let script = r#"
        read -r pgid < <(ps -o pgid= -p $$); echo "group $(( pgid == $$ ))"
        echo "cwd $PWD"
        echo "stdin $(readlink /proc/$$/fd/0)"
        echo "env $KEPT $REPLACED ${GONE-unset} $OWN"
    "#;
    let mut spec = bash(script);
    spec.cwd = Some(dir.path().to_path_buf());
    spec.env = vec![
        ("REPLACED".into(), dsh_subprocess::EnvEntry::Set("own".into())),
        ("GONE".into(), dsh_subprocess::EnvEntry::Unset),
        ("OWN".into(), dsh_subprocess::EnvEntry::Set("x=y".into())),
    ];
    let handle = service.spawn(spec).expect("spawn");
    let outcome = handle.wait().await;
    assert_eq!(outcome.exit_code, Some(0), "{}", handle.stderr().collected().text);
    let text = handle.stdout().collected().text;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "group 1", "{text}");
    let cwd = dir.path().canonicalize().expect("canonical");
    assert_eq!(lines[1], format!("cwd {}", cwd.display()));
    assert_eq!(lines[2], "stdin /dev/null");
    assert_eq!(lines[3], "env ambient own unset x=y");

    // The descriptors, looked at from outside once the program runs (a shell looking at its
    // own would see the pipes of its own pipelines).
    let handle = service.spawn(SpawnSpec::new(vec!["sleep".into(), "30".into()])).expect("spawn");
    let fd_dir = format!("/proc/{}/fd", handle.pid());
    let comm = format!("/proc/{}/comm", handle.pid());
    for _ in 0..500 {
        if std::fs::read_to_string(&comm).is_ok_and(|name| name.trim() == "sleep") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut fds: Vec<u32> = std::fs::read_dir(&fd_dir)
        .expect("fd dir")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    handle.terminate();
    handle.wait().await;
    assert_eq!(fds, [0, 1, 2], "only the standard descriptors");

    // The signal state as the program starts (bash would change its own before printing).
    let spec =
        SpawnSpec::new(vec!["grep".into(), "-E".into(), "^Sig(Blk|Ign)".into(), "/proc/self/status".into()]);
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    let text = handle.stdout().collected().text;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "SigBlk:\t0000000000000000", "{text}");
    let ignored = u64::from_str_radix(lines[1].trim_start_matches("SigIgn:\t"), 16).expect("hex");
    assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE is at its default: {text}");

    let mut spec = bash("readlink /proc/$$/fd/0 | cut -d: -f1; cat");
    spec.stdin = Some(b"fed".to_vec());
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "pipe\nfed");
}

/// What `grep` reports of its own ignored signals as it starts, as a mask.
async fn ignored_signals(service: &SubprocessService, mut spec: SpawnSpec) -> u64 {
    spec.argv = vec!["grep".into(), "^SigIgn".into(), "/proc/self/status".into()];
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    let text = handle.stdout().collected().text;
    let mask = text.trim().trim_start_matches("SigIgn:").trim();
    u64::from_str_radix(mask, 16).unwrap_or_else(|_| panic!("a mask: {text:?}"))
}

#[tokio::test]
async fn no_signal_the_harness_ignores_stays_ignored_in_the_program() {
    // A harness started in the background by a shell ignores SIGINT and SIGQUIT, one under
    // `nohup` SIGHUP; this test process ignores them from here on (and SIGPIPE, as every
    // Rust program does), which changes nothing else in this binary.
    let ignored = [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGUSR1, libc::SIGRTMIN() + 2];
    for signal in ignored {
        // SAFETY: sets a signal's action to "ignore"; no handler.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let service = SubprocessService::new();
    let plain = SpawnSpec::new(Vec::new());
    let mut hooked = SpawnSpec::new(Vec::new());
    // SAFETY: an empty hook.
    unsafe { hooked.pre_exec(|| Ok(())) };
    let mut session = SpawnSpec::new(Vec::new());
    session.new_session = true;
    let mut terminal = SpawnSpec::new(Vec::new());
    terminal.pty = Some(dsh_subprocess::PtySize::DEFAULT);
    terminal.new_session = true;
    // Not even the C library's own signals (32 up to SIGRTMIN), which its `posix_spawn` would
    // leave ignored in every child it starts.
    for (start, spec) in
        [("direct", plain), ("hooked", hooked), ("new session", session), ("terminal", terminal)]
    {
        let mask = ignored_signals(&service, spec).await;
        assert_eq!(mask, 0, "{start} start: {mask:#x}");
    }
}

/// While starts run, another thread keeps a descriptor open without close-on-exec (as C code
/// in the harness might): no child gets it, on either start path. Marking descriptors in the
/// parent before a `posix_spawn` would leave a window; the direct start closes them in the
/// child, as the forked one does.
#[tokio::test]
async fn a_descriptor_another_thread_opens_during_a_start_is_not_inherited() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: `dup` makes a descriptor without close-on-exec, closed right after.
                unsafe {
                    let fd = libc::dup(2);
                    std::hint::spin_loop();
                    libc::close(fd);
                }
            }
        })
    };
    let service = SubprocessService::new();
    let mut leaks = Vec::new();
    for round in 0..150 {
        let mut spec = SpawnSpec::new(vec!["ls".into(), "/proc/self/fd".into()]);
        if round % 2 == 1 {
            // SAFETY: an empty hook (the forked start).
            unsafe { spec.pre_exec(|| Ok(())) };
        }
        let handle = service.spawn(spec).expect("spawn");
        assert_eq!(handle.wait().await.exit_code, Some(0));
        // 0, 1, 2 and the directory `ls` reads.
        let listed = handle.stdout().collected().text;
        if listed.lines().count() != 4 {
            leaks.push((round, listed));
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().expect("churn");
    assert!(leaks.is_empty(), "inherited descriptors (round, listing): {leaks:?}");
}

/// Starts from several runtime threads at once, failures among them: every child runs its own
/// program with its own arguments, stdin and directory, and a failed start reports its own
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn starts_from_several_threads_at_once_each_get_their_own_program() {
    let service = std::sync::Arc::new(SubprocessService::new());
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..16usize {
        let service = std::sync::Arc::clone(&service);
        let dir = dirs[task % dirs.len()].path().to_path_buf();
        tasks.spawn(async move {
            let mut wrong = Vec::new();
            for round in 0..30usize {
                if round % 7 == 3 {
                    let missing = format!("no-such-program-dsh-{task}-{round}");
                    match service.spawn(SpawnSpec::new(vec![missing.clone()])) {
                        Err(SpawnError::Os(e)) if e.errno == Errno::ENOENT && e.stage == SpawnStage::Exec => {
                        }
                        other => wrong.push(format!("{missing}: {other:?}")),
                    }
                    continue;
                }
                let mut spec = SpawnSpec::new(vec![
                    "bash".into(),
                    "-c".into(),
                    "printf '%s %s' \"$1\" \"$PWD\"; cat".into(),
                    "bash".into(),
                    format!("{task}-{round}"),
                ]);
                spec.cwd = Some(dir.clone());
                spec.stdin = Some(format!(" in-{task}-{round}").into_bytes());
                let handle = service.spawn(spec).expect("spawn");
                let outcome = handle.wait().await;
                let text = handle.stdout().collected().text;
                let expected = format!("{task}-{round} {} in-{task}-{round}", dir.display());
                if outcome.exit_code != Some(0) || text != expected {
                    wrong.push(format!("{expected:?}: {:?} {text:?}", outcome.exit_code));
                }
            }
            wrong
        });
    }
    let mut wrong = Vec::new();
    while let Some(result) = tasks.join_next().await {
        wrong.extend(result.expect("task"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
