//! The MCP server's `instructions` tell the model where its commands stand (the executor, the
//! sandbox mode, what it may write, the network policy) when the composition confines them;
//! the default composition's instructions, `prompt` and the tool schema say nothing of it.

use crate::harness::Sandbox;
use crate::mcp::StdioServer;

const STANDING: &str = "Where your commands run: ";

fn instructions(sandbox: &Sandbox, global: &[&str]) -> String {
    let server = StdioServer::start_with(sandbox, global, None);
    let text = server.init["result"]["instructions"].as_str().expect("instructions").to_owned();
    let (code, stderr) = server.finish();
    assert_eq!(code, Some(0), "{stderr}");
    text
}

#[test]
fn mcp_instructions_name_the_sandbox_roots_network_and_executor() {
    let sandbox = Sandbox::outside_tmp();
    let root = sandbox.path().canonicalize().expect("canonical");
    let extra = root.join("extra");
    std::fs::create_dir(&extra).expect("mkdir extra");
    let root_text = root.to_str().expect("utf-8");
    let extra_text = extra.to_str().expect("utf-8");

    let plain = instructions(&sandbox, &["--workspace-root", root_text]);
    assert!(!plain.contains(STANDING), "the default composition's instructions are the prompt's: {plain}");

    let confined = instructions(
        &sandbox,
        &[
            "--workspace-root",
            root_text,
            "--sandbox",
            "workspace-write",
            "--add-dir",
            extra_text,
            "--network",
            "deny",
            "--allow-host",
            "registry.example.org",
        ],
    );
    let standing = &confined[confined.find(STANDING).unwrap_or_else(|| panic!("no standing: {confined}"))..];
    let cache_root = root.join("home/sandbox-cache");
    assert_eq!(
        standing,
        format!(
            "Where your commands run: executor local (this machine). Sandbox: workspace-write (commands may write only under {root_text} (or the session's working directory), {extra_text}, and a private /tmp; package caches of their own in {} (set through NPM_CONFIG_CACHE, YARN_CACHE_FOLDER, PIP_CACHE_DIR, UV_CACHE_DIR, CARGO_HOME, GOMODCACHE, GOCACHE); the rest is read-only and the user's credentials are unreadable). Network: deny (the listed hosts are registry.example.org; through the harness's proxy, nothing else).",
            cache_root.display()
        )
    );
    assert!(confined.starts_with(&plain[..plain.len().min(200)]), "the paragraph is added after the prompt");

    let read_only = instructions(&sandbox, &["--workspace-root", root_text, "--sandbox", "read-only"]);
    assert!(
        read_only.ends_with(
            "Where your commands run: executor local (this machine). Sandbox: read-only (commands write nowhere; the user's credentials are unreadable). Network: allow (any host)."
        ),
        "{read_only}"
    );

    // An SSH executor (not connected to for the instructions).
    let ssh = instructions(&sandbox, &["--executor", "ssh", "--ssh-host", "someone@127.0.0.1:9"]);
    assert!(
        ssh.ends_with(
            "Where your commands run: executor ssh (ssh someone@127.0.0.1:9). Sandbox: none beyond the executor's own (commands may write wherever its user may)."
        ),
        "{ssh}"
    );
}

#[test]
fn the_prompt_and_schema_do_not_name_where_commands_stand() {
    let sandbox = Sandbox::new();
    for args in [&["prompt"][..], &["schema"][..], &["--sandbox", "workspace-write", "prompt"][..]] {
        let out = sandbox.run(args, "");
        assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
        assert!(!out.stdout.contains(STANDING), "{args:?}: {}", out.stdout);
    }
}

#[test]
fn doctor_names_the_toolchain_cache_root() {
    let sandbox = Sandbox::outside_tmp();
    let out = sandbox.run(&["--sandbox", "workspace-write", "doctor"], "");
    let root = sandbox.path().join("home/sandbox-cache");
    let line = format!(
        "toolchain caches of workspace-write commands: {} (NPM_CONFIG_CACHE, YARN_CACHE_FOLDER, PIP_CACHE_DIR, UV_CACHE_DIR, CARGO_HOME, GOMODCACHE, GOCACHE; the user's own caches stay read-only)",
        root.display()
    );
    assert!(out.stdout.lines().any(|l| l == line), "{out:?}");
}
