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
