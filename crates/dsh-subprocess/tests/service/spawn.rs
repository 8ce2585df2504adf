use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use dsh_core::{AbortReason, AbortSignal};
use dsh_subprocess::{Errno, OsSpawnError, SpawnError, SpawnSpec, SpawnStage, SubprocessService};

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
    for grace in [0.0, -1.0, f64::NAN, f64::INFINITY, 2_147_483_648.0] {
        let mut spec = bash("echo never");
        spec.grace_ms = grace;
        let err = service.spawn(spec).expect_err("invalid grace");
        assert_eq!(
            err.to_string(),
            "subprocess graceMs must be a positive finite number no greater than 2147483647",
            "grace {grace}"
        );
    }
    assert_eq!(service.live_count(), 0, "nothing was spawned");
    let mut spec = bash("true");
    spec.grace_ms = 2_147_483_647.0;
    assert_eq!(service.spawn(spec).expect("max grace is valid").wait().await.exit_code, Some(0));
}

#[tokio::test]
async fn sp_02_spawn_preconditions() {
    let service = SubprocessService::new();
    let signal = AbortSignal::new();
    signal.abort(AbortReason::new("too late"));
    let mut spec = bash("echo never");
    spec.signal = Some(signal);
    assert_eq!(service.spawn(spec).expect_err("pre-aborted").to_string(), "aborted before spawn: too late");

    for argv in [vec![], vec![String::new()]] {
        let err = service.spawn(SpawnSpec::new(argv)).expect_err("bad argv");
        assert_eq!(err.to_string(), "invalid argv: expected a non-empty program name at argv[0]");
    }

    let mut spec = bash("true");
    spec.cwd = Some("/nonexistent-dsh".into());
    let err = os_error(service.spawn(spec).expect_err("missing cwd"));
    assert_eq!(err.to_string(), "spawn bash ENOENT");
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
    std::fs::write(&script, "#!/nonexistent/interpreter\n").expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
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
    spec.pre_exec = Some(Arc::new(|| {
        // SAFETY: umask is async-signal-safe and only affects the forked child.
        unsafe { libc::umask(0o027) };
        Ok(())
    }));
    let handle = service.spawn(spec).expect("spawn");
    assert_eq!(handle.wait().await.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "0027\n");
}

#[tokio::test]
async fn a_failing_pre_exec_hook_is_its_own_spawn_stage() {
    let service = SubprocessService::new();
    let mut spec = bash("echo never");
    spec.cwd = Some("/".into());
    spec.pre_exec = Some(Arc::new(|| Err(std::io::Error::from_raw_os_error(libc::EPERM))));
    let err = os_error(service.spawn(spec).expect_err("hook fails"));
    assert_eq!(err.to_string(), "spawn bash EPERM");
    assert_eq!(err.stage, SpawnStage::PreExec);

    // With a hook, an exec failure is still an exec failure.
    let mut spec = SpawnSpec::new(vec!["/nonexistent/runner".into()]);
    spec.pre_exec = Some(Arc::new(|| Ok(())));
    let err = os_error(service.spawn(spec).expect_err("exec fails"));
    assert_eq!((err.errno, err.stage), (Errno::ENOENT, SpawnStage::Exec));
}
