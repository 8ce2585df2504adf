use dsh_subprocess::{EnvEntry, ServiceOptions, SubprocessService};

use crate::{ambient_with, bash};

async fn stdout_of(service: &SubprocessService, spec: dsh_subprocess::SpawnSpec) -> String {
    let handle = service.spawn(spec).expect("spawn");
    let outcome = handle.wait().await;
    assert_eq!(outcome.exit_code, Some(0), "stderr: {}", handle.stderr().collected().text);
    handle.stdout().collected().text
}

fn service_with(extra: &[(&str, &str)]) -> std::sync::Arc<SubprocessService> {
    SubprocessService::with_options(ServiceOptions {
        ambient_env: ambient_with(extra),
        ..ServiceOptions::default()
    })
}

#[tokio::test]
async fn sp_06_env_rules() {
    let service = service_with(&[
        ("DSH_TEST_API_KEY", "k"),
        ("DSH_TEST_TOKEN", "t"),
        ("SUBPROCESS_TEST_PASSWORD", "p"),
        ("DSH_TEST_PLAIN", "plain"),
        ("DSH_STALE", "old"),
        ("ORDINARY", "here"),
    ]);
    let spec = bash(
        r#"printf '[%s|%s|%s|%s]' "${DSH_TEST_API_KEY-absent}" "${DSH_TEST_TOKEN-absent}" "${SUBPROCESS_TEST_PASSWORD-absent}" "${DSH_TEST_PLAIN-absent}""#,
    );
    assert_eq!(stdout_of(&service, spec).await, "[absent|absent|absent|absent]");

    let mut spec = bash(r#"printf '%s' "${EXPLICIT_OVERRIDE_PASSWORD-absent}""#);
    spec.env = vec![("EXPLICIT_OVERRIDE_PASSWORD".into(), EnvEntry::Set("explicit-wins".into()))];
    assert_eq!(stdout_of(&service, spec).await, "explicit-wins");

    let mut spec =
        bash(r#"printf '[%s|%s|%s]' "${DSH_STALE-absent}" "${DSH_SHELL-absent}" "${DSH_SESSION_ID-absent}""#);
    spec.env = vec![
        ("DSH_SHELL".into(), EnvEntry::Set("1".into())),
        ("DSH_SESSION_ID".into(), EnvEntry::Set("current-session".into())),
    ];
    assert_eq!(stdout_of(&service, spec).await, "[absent|1|current-session]");

    let mut spec = bash(r#"printf '%s|%s' "${ORDINARY-absent}" "${TERM-absent}""#);
    spec.env =
        vec![("ORDINARY".into(), EnvEntry::Unset), ("TERM".into(), EnvEntry::Set("callers-choice".into()))];
    assert_eq!(stdout_of(&service, spec).await, "absent|callers-choice");
}

#[tokio::test]
async fn ambient_credentials_are_invisible_while_path_home_and_explicit_entries_survive() {
    let service = service_with(&[
        ("AWS_SECRET_ACCESS_KEY", "aws"),
        ("GITHUB_TOKEN", "gh"),
        ("OPENAI_API_KEY", "oai"),
        ("db_password", "db"),
    ]);
    let mut spec = bash(
        r#"env | grep -ciE 'aws|github|openai|db_pass|^dsh_' ; printf '%s|%s|%s' "${PATH:+path}" "${HOME:+home}" "$MINE""#,
    );
    spec.env = vec![("MINE".into(), EnvEntry::Set("explicit".into()))];
    let handle = service.spawn(spec).expect("spawn");
    let outcome = handle.wait().await;
    // grep -c prints 0 and exits 1 when nothing matched.
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(handle.stdout().collected().text, "0\npath|home|explicit");
}

#[tokio::test]
async fn the_program_is_found_on_the_childs_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tool = dir.path().join("only-in-child-path");
    crate::write_script(&tool, "#!/bin/sh\necho found-by-child-path\n");
    let service = service_with(&[]);
    let mut spec = dsh_subprocess::SpawnSpec::new(vec!["only-in-child-path".into()]);
    let child_path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
    spec.env = vec![("PATH".into(), EnvEntry::Set(child_path))];
    assert_eq!(stdout_of(&service, spec).await, "found-by-child-path\n");

    // The parent's PATH does not have it, so without the override it is not found.
    let spec = dsh_subprocess::SpawnSpec::new(vec!["only-in-child-path".into()]);
    let err = service.spawn(spec).expect_err("must not be found on the parent's PATH");
    assert_eq!(err.to_string(), "spawn only-in-child-path ENOENT");
}

/// A program found once is started from where it was found, unchecked, until starting it
/// there fails: then it is searched for again on the child's `PATH`, and what the search
/// finds (or its error) is the start's.
#[tokio::test]
async fn a_remembered_program_that_went_away_is_searched_for_again() {
    use std::os::unix::fs::PermissionsExt;
    let (first, second) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    let service = service_with(&[]);
    let spec = || {
        let mut spec = dsh_subprocess::SpawnSpec::new(vec!["moving-tool".into()]);
        let path = format!("{}:{}", first.path().display(), second.path().display());
        spec.env = vec![("PATH".into(), EnvEntry::Set(path))];
        spec
    };
    crate::write_script(&first.path().join("moving-tool"), "#!/bin/sh\necho first\n");
    crate::write_script(&second.path().join("moving-tool"), "#!/bin/sh\necho second\n");
    assert_eq!(stdout_of(&service, spec()).await, "first\n");
    assert_eq!(stdout_of(&service, spec()).await, "first\n", "remembered");

    // No longer executable where it was found: the next one on the path runs.
    std::fs::set_permissions(first.path().join("moving-tool"), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    assert_eq!(stdout_of(&service, spec()).await, "second\n");
    // Gone from where it was found, with none left: the search's error.
    std::fs::remove_file(second.path().join("moving-tool")).expect("remove");
    let error = service.spawn(spec()).expect_err("nothing left to run");
    assert_eq!(error.to_string(), "spawn moving-tool EACCES", "the first is there, not executable");
    std::fs::remove_file(first.path().join("moving-tool")).expect("remove");
    let error = service.spawn(spec()).expect_err("nothing left to run");
    assert_eq!(error.to_string(), "spawn moving-tool ENOENT");
    // And one that appears again is found again.
    crate::write_script(&second.path().join("moving-tool"), "#!/bin/sh\necho back\n");
    assert_eq!(stdout_of(&service, spec()).await, "back\n");
}
