use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::Arc;

use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
use dsh_shell::{ShellExecRequest, ShellExecutor};
use dsh_subprocess::{AmbientEnv, ServiceOptions, SubprocessService};

use crate::request;

fn executor_with_ambient(extra: &[(&str, &str)]) -> LocalBashExecutor {
    let mut vars: Vec<(OsString, OsString)> =
        ["PATH", "HOME"].iter().filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v))).collect();
    vars.extend(extra.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
    let service = SubprocessService::with_options(ServiceOptions {
        ambient_env: AmbientEnv::Fixed(Arc::new(vars)),
        ..ServiceOptions::default()
    });
    LocalBashExecutor::new(LocalBashConfig { grace_ms: 200.0, ..LocalBashConfig::default() }, service)
        .expect("executor")
}

fn map(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
}

#[tokio::test]
async fn overrides_then_env_then_dsh_env() {
    let executor =
        executor_with_ambient(&[("TERM", "xterm-256color"), ("PAGER", "less"), ("DSH_STALE", "old")]);
    let spec = executor
        .resolve(ShellExecRequest {
            env: map(&[("GIT_PAGER", "delta"), ("DSH_SESSION_ID", "from-env"), ("PLAIN", "p")]),
            dsh_env: map(&[("DSH_SESSION_ID", "current"), ("DSH_SHELL", "1")]),
            ..request(
                r#"printf '%s|' "$NO_COLOR" "$TERM" "$PAGER" "$GIT_PAGER" "$PLAIN" "$DSH_SESSION_ID" "$DSH_SHELL" "${DSH_STALE-absent}""#,
            )
        })
        .expect("resolve");
    let result = executor.run(spec).await.expect("run");
    assert_eq!(result.stdout.text, "1|dumb|cat|delta|p|current|1|absent|");
}

#[tokio::test]
async fn ambient_credentials_never_reach_bash() {
    let executor = executor_with_ambient(&[
        ("AWS_SECRET_ACCESS_KEY", "aws"),
        ("GITHUB_TOKEN", "gh"),
        ("OPENAI_API_KEY", "oai"),
        ("db_password", "db"),
    ]);
    let spec = executor
        .resolve(ShellExecRequest {
            env: map(&[("EXPLICIT", "kept")]),
            ..request(
                r#"printf '%s|' "${AWS_SECRET_ACCESS_KEY-absent}" "${GITHUB_TOKEN-absent}" "${OPENAI_API_KEY-absent}" "${db_password-absent}" "${PATH:+path}" "${HOME:+home}" "$EXPLICIT""#,
            )
        })
        .expect("resolve");
    let result = executor.run(spec).await.expect("run");
    assert_eq!(result.stdout.text, "absent|absent|absent|absent|path|home|kept|");
}
