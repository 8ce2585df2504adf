//! What commands see of the harness's environment: credentials, the MCP token and the ssh
//! agent stay behind.

use crate::harness::{Sandbox, confining_host, output};

/// `call bash` printing `NAME=<value or unset>` for each name, one per line.
fn show(sandbox: &Sandbox, switches: &[&str], names: &[&str], env: &[(&str, &str)]) -> String {
    let script: String = names.iter().map(|n| format!("echo \"{n}=${{{n}-unset}}\"; ")).collect();
    let args = serde_json::json!({"command": script, "description": "Show variables"}).to_string();
    let mut all = switches.to_vec();
    all.extend(["call", "bash", &args]);
    let mut command = sandbox.command(&all);
    command.envs(env.iter().copied());
    let out = output(command, b"");
    assert_eq!(out.code, Some(0), "{out:?}");
    out.stdout
}

#[test]
fn credential_urls_and_credential_shaped_names_do_not_reach_commands() {
    let sandbox = Sandbox::new();
    let env = [
        ("DATABASE_URL", "postgres://u:pw@h/db"),
        ("HTTPS_PROXY", "http://u:pw@proxy:3128"),
        ("GITHUB_PAT", "ghp_x"),
        ("NPM_CONFIG__AUTH", "dXNlcjpwdw=="),
        ("SMTP_PASS", "pw"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json"),
        ("PLAIN_URL", "postgres://h/db"),
        ("HTTP_PROXY", "http://proxy:3128"),
        ("GIT_URL", "ssh://git@github.com/x.git"),
        ("DSH_MCP_TOKEN", "mcp-token"),
    ];
    let names: Vec<&str> = env.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        show(&sandbox, &[], &names, &env),
        "DATABASE_URL=unset\nHTTPS_PROXY=unset\nGITHUB_PAT=unset\nNPM_CONFIG__AUTH=unset\n\
         SMTP_PASS=unset\nGOOGLE_APPLICATION_CREDENTIALS=unset\nPLAIN_URL=postgres://h/db\n\
         HTTP_PROXY=http://proxy:3128\nGIT_URL=ssh://git@github.com/x.git\nDSH_MCP_TOKEN=unset\n"
    );
}

#[test]
fn confined_commands_go_without_the_ssh_agent_unless_it_is_kept() {
    if !confining_host() {
        return;
    }
    let sandbox = Sandbox::outside_tmp();
    let agent = [("SSH_AUTH_SOCK", "/run/agent.sock")];
    let names = ["SSH_AUTH_SOCK"];
    assert_eq!(show(&sandbox, &[], &names, &agent), "SSH_AUTH_SOCK=/run/agent.sock\n", "unconfined");
    for mode in ["read-only", "workspace-write"] {
        assert_eq!(show(&sandbox, &["--sandbox", mode], &names, &agent), "SSH_AUTH_SOCK=\n", "{mode}");
    }
    assert_eq!(
        show(&sandbox, &["--sandbox", "danger-full-access"], &names, &agent),
        "SSH_AUTH_SOCK=/run/agent.sock\n"
    );
    let kept = [("SSH_AUTH_SOCK", "/run/agent.sock"), ("DSH_KEEP_SSH_AUTH_SOCK", "1")];
    assert_eq!(show(&sandbox, &["--sandbox", "read-only"], &names, &kept), "SSH_AUTH_SOCK=/run/agent.sock\n");
    let mut command = sandbox.command(&[
        "--sandbox",
        "read-only",
        "call",
        "bash",
        r#"{"command":"echo \"[${SSH_AUTH_SOCK-unset}]\"","description":"d"}"#,
    ]);
    command.env_remove("SSH_AUTH_SOCK");
    assert_eq!(output(command, b"").stdout, "[unset]\n", "no agent, nothing added");
}
