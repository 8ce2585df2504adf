//! The stdio server at the JSON-RPC level, over an in-memory pipe, with stand-in tools.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dsh_approval::ApprovalPlugin;
use dsh_core::plugins::{AgentsPlugin, SystemPromptPlugin, ToolsPlugin};
use dsh_core::{AGENTS, Agent, AgentStatus, Context, Decision, TOOLS, ToolCall};
use dsh_mcp::{McpOptions, serve_io};
use dsh_test_support::eventually;
use dsh_test_support::fakes::{Observed, notice, register_fakes};
use serde_json::{Value, json};
use support::raw::{RawClient, texts};

fn composition() -> (Context, Arc<Observed>) {
    let ctx = Context::new();
    ctx.load_default::<ToolsPlugin>().expect("tools");
    ctx.load_default::<SystemPromptPlugin>().expect("prompt");
    ctx.load_default::<AgentsPlugin>().expect("agents");
    let observed = register_fakes(&ctx);
    (ctx, observed)
}

fn options(workspace: &std::path::Path) -> McpOptions {
    McpOptions {
        handle_signals: false,
        progress_interval: Duration::from_millis(500),
        workspace_root: Some(workspace.to_path_buf()),
        max_message_bytes: 64 * 1024,
        ..McpOptions::default()
    }
}

fn start(ctx: &Context, options: McpOptions) -> (RawClient, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server);
    let handle = tokio::spawn(serve_io(ctx.clone(), options, read, write));
    (RawClient::new(client), handle)
}

fn the_agent(ctx: &Context) -> Arc<Agent> {
    let agents = ctx.get(AGENTS).expect("agents").all();
    assert_eq!(agents.len(), 1, "one MCP session, one agent");
    Arc::clone(&agents[0])
}

#[tokio::test]
async fn initialize_reports_instructions_and_capabilities() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    let init = client.initialize(json!({})).await;
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], json!("2025-11-25"));
    assert_eq!(result["serverInfo"]["name"], json!("dsh-bash"));
    // The identity line is not the client's: by default the instructions leave it out (this
    // composition has no other section, so there are none).
    assert_eq!(result.get("instructions"), None, "{result}");
    assert!(result["capabilities"]["tools"].is_object());
    assert!(result["capabilities"]["logging"].is_object());

    // An older client keeps its revision.
    let (mut old, _server) = start(&ctx, options(dir.path()));
    let init = old
        .request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], json!("2025-06-18"));
}

#[tokio::test]
async fn instructions_keep_the_identity_and_persona_only_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let prompt = ctx.get(dsh_core::SYSTEM_PROMPT).expect("prompt");
    let _section = prompt.register_section("tool:probe", 105.0, "Use the probe tool.").expect("section");

    let (mut client, _server) = start(&ctx, options(dir.path()));
    let init = client.initialize(json!({})).await;
    assert_eq!(init["result"]["instructions"], json!("Use the probe tool."));

    let with_identity = McpOptions { instructions_with_identity: true, ..options(dir.path()) };
    let (mut client, _server) = start(&ctx, with_identity);
    let init = client.initialize(json!({})).await;
    assert_eq!(
        init["result"]["instructions"],
        json!("You are an AI agent powered by DeepSeek Harness.\n\nUse the probe tool.")
    );
}

#[tokio::test]
async fn tools_list_carries_registry_schemas_and_object_output_schemas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;
    let listed = client.request(1, "tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["echo", "slow", "whoami", "notify"]);
    let registry = ctx.get(TOOLS).expect("tools");
    let echo = &tools[0];
    assert_eq!(echo["description"], json!("Echo the text back."));
    assert_eq!(echo["inputSchema"], registry.schemas()[0].parameters);
    assert_eq!(
        echo["inputSchema"],
        json!({"type": "object", "properties": {"text": {"type": "string", "description": "Text to echo."}}, "required": ["text"]})
    );
    assert_eq!(
        echo["outputSchema"],
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false})
    );
    assert_eq!(
        tools[3]["outputSchema"],
        json!({
            "type": "object",
            "properties": {"result": {"type": "array", "items": {"type": "string"}}},
            "required": ["result"],
            "additionalProperties": false
        })
    );
}

#[tokio::test]
async fn call_results_carry_text_is_error_and_structured_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;

    let ok = client.call(1, "echo", json!({"text": "hi"})).await;
    assert_eq!(ok["result"]["content"], json!([{"type": "text", "text": "hi"}]));
    assert_eq!(ok["result"]["isError"], json!(false));
    assert_eq!(ok["result"]["structuredContent"], json!({"text": "hi"}));

    let invalid = client.call(2, "echo", json!({})).await;
    assert_eq!(texts(&invalid), ["Error: invalid arguments: missing required property \"text\""]);
    assert_eq!(invalid["result"]["isError"], json!(true));
    assert!(invalid["result"].get("structuredContent").is_none());
    assert_eq!(
        invalid["result"]["_meta"]["dsh/error"],
        json!({
            "message": "invalid arguments: missing required property \"text\"",
            "info": {"name": "ToolArgsError", "code": "INVALID_ARGS"}
        })
    );

    let unknown = client.call(3, "nope", json!({})).await;
    assert_eq!(texts(&unknown), ["Error: unknown tool \"nope\""]);
    assert_eq!(unknown["result"]["isError"], json!(true));

    let wrapped = client.call(4, "notify", json!({"text": "n"})).await;
    assert_eq!(wrapped["result"]["structuredContent"], json!({"result": ["n"]}));
}

#[tokio::test]
async fn bad_input_gets_json_rpc_errors_and_serving_continues() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;

    client.send_raw(b"{not json").await;
    let parse = client.next().await.expect("an answer");
    assert_eq!(parse["id"], Value::Null);
    assert_eq!(parse["error"]["code"], json!(-32700));

    client.send_raw(b"[1, 2]").await;
    let batch = client.next().await.expect("an answer");
    assert_eq!(batch["id"], Value::Null);
    assert_eq!(batch["error"]["code"], json!(-32600));

    client.send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": 5}})).await;
    let params = client.response(json!(9)).await;
    assert_eq!(params["error"]["code"], json!(-32602));
    let text = params["error"]["message"].as_str().expect("message");
    assert!(text.starts_with("Invalid params for \"tools/call\": invalid type: integer `5`"), "{text}");

    client.send(json!({"jsonrpc": "2.0", "id": 10, "method": "no/such/method"})).await;
    let unknown = client.response(json!(10)).await;
    assert_eq!(unknown["error"]["code"], json!(-32601));

    client.send(json!({"jsonrpc": "1.0", "id": 11, "method": "tools/list"})).await;
    let version = client.response(json!(11)).await;
    assert_eq!(version["error"]["code"], json!(-32600));

    // A malformed notification is never answered: the next answer is the next request's.
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": 5})).await;

    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":12,"method":"tools/list","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100_000)
    );
    client.send_raw(huge.as_bytes()).await;
    let oversize = client.next().await.expect("an answer");
    assert_eq!(oversize["id"], Value::Null);
    assert_eq!(oversize["error"]["code"], json!(-32600));
    assert_eq!(
        oversize["error"]["message"],
        json!("Invalid Request: a message may hold at most 65536 bytes")
    );

    let ok = client.call(13, "echo", json!({"text": "still serving"})).await;
    assert_eq!(texts(&ok), ["still serving"]);
    assert!(client.seen.is_empty(), "nothing else was said: {:?}", client.seen);
}

#[tokio::test]
async fn client_cancellation_aborts_the_call_and_the_session_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, observed) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;
    client.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 60}}})).await;
    eventually("the slow call to start", || observed.runs.load(Ordering::SeqCst) == 1).await;
    let agent = the_agent(&ctx);
    assert_eq!(agent.status(), AgentStatus::Busy);
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "user"}})).await;
    eventually("the call to observe its abort", || observed.aborted.load(Ordering::SeqCst) == 1).await;
    let ok = client.call(6, "echo", json!({"text": "after"})).await;
    assert_eq!(texts(&ok), ["after"]);
    assert!(
        !client.seen.iter().any(|m| m.get("id") == Some(&json!(5))),
        "a cancelled request gets no answer"
    );
    assert_eq!(agent.status(), AgentStatus::Idle);
}

#[tokio::test]
async fn progress_is_reported_while_a_call_runs_at_a_bounded_rate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;
    let started = std::time::Instant::now();
    let response = client
        .request(
            1,
            "tools/call",
            json!({"name": "slow", "arguments": {"seconds": 2.5}, "_meta": {"progressToken": "p-1"}}),
        )
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(texts(&response), ["slept 2.5s"]);
    let progress: Vec<&Value> =
        client.seen.iter().filter(|m| m["method"] == json!("notifications/progress")).collect();
    assert!(progress.len() >= 2, "progress while running: {progress:?}");
    assert!(progress.len() as f64 <= elapsed / 0.5 + 1.0, "at most two per second: {progress:?}");
    let values: Vec<f64> =
        progress.iter().map(|p| p["params"]["progress"].as_f64().expect("number")).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {values:?}");
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], json!("p-1"));
        assert!(p["params"]["message"].as_str().expect("message").starts_with("slow: running for "));
    }
    // Without a token nothing is reported.
    client.seen.clear();
    client.call(2, "slow", json!({"seconds": 1.2})).await;
    assert!(client.seen.is_empty(), "no progress without a token: {:?}", client.seen);
}

#[tokio::test]
async fn notices_are_logged_at_once_and_attached_to_the_next_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;

    // Delivered during a call: logged, and attached to that call's result.
    let during = client.call(1, "notify", json!({"text": "background job bash-1 finished"})).await;
    assert_eq!(texts(&during), ["delivered", "background job bash-1 finished"]);
    assert_eq!(during["result"]["_meta"]["dsh/notices"][0]["text"], json!("background job bash-1 finished"));
    let logged = client.until(|m| m["method"] == json!("notifications/message")).await;
    assert_eq!(
        logged["params"],
        json!({"level": "notice", "logger": "tool-jobs", "data": "background job bash-1 finished"})
    );

    // Delivered between calls (a job settling while the session idles): logged at once, and
    // attached to the next result only.
    let agent = the_agent(&ctx);
    assert_eq!(agent.status(), AgentStatus::Idle);
    agent.followup(notice("background job bash-2 finished"));
    let logged = client.until(|m| m["method"] == json!("notifications/message")).await;
    assert_eq!(logged["params"]["data"], json!("background job bash-2 finished"));
    let next = client.call(2, "echo", json!({"text": "hi"})).await;
    assert_eq!(texts(&next), ["hi", "background job bash-2 finished"]);
    let after = client.call(3, "echo", json!({"text": "hi"})).await;
    assert_eq!(texts(&after), ["hi"]);

    // Each call ran inside its own turn.
    let kinds: Vec<String> = agent.session().events().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["turn/start", "turn/end", "turn/start", "turn/end", "turn/start", "turn/end"]);

    // A client that raised its log level above notices gets them in results only.
    client.request(4, "logging/setLevel", json!({"level": "error"})).await;
    agent.followup(notice("quiet"));
    let quiet = client.call(5, "echo", json!({"text": "hi"})).await;
    assert_eq!(texts(&quiet), ["hi", "quiet"]);
    assert!(!client.seen.iter().any(|m| m["params"]["data"] == json!("quiet")));
}

#[tokio::test]
async fn the_session_cwd_comes_from_the_first_file_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("root");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({"roots": {"listChanged": false}})).await;
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}})).await;
    let ask = client.until(|m| m["method"] == json!("roots/list")).await;
    let uri = format!("file://{}", root.path().display().to_string().replace(' ', "%20"));
    client
        .send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": "https://example.invalid/x"}, {"uri": uri}]}}))
        .await;
    let who = client.response(json!(1)).await;
    assert_eq!(who["result"]["structuredContent"]["cwd"], json!(root.path().display().to_string()));
    let agent_id = who["result"]["structuredContent"]["agent"].as_str().expect("id").to_owned();
    assert!(agent_id.starts_with("mcp-"), "{agent_id}");
    // The cwd is fixed for the session: later calls ask nothing.
    let again = client.call(2, "whoami", json!({})).await;
    assert_eq!(again["result"]["structuredContent"]["agent"], json!(agent_id));

    // Without roots: the workspace root.
    let (mut plain, _server) = start(&ctx, options(dir.path()));
    plain.initialize(json!({})).await;
    let who = plain.call(1, "whoami", json!({})).await;
    assert_eq!(who["result"]["structuredContent"]["cwd"], json!(dir.path().display().to_string()));
    assert_ne!(who["result"]["structuredContent"]["agent"], json!(agent_id), "each session its own agent");
}

#[tokio::test]
async fn end_of_input_ends_the_session_and_disposes_the_composition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;
    client.call(1, "echo", json!({"text": "hi"})).await;
    let agent = the_agent(&ctx);
    client.close_input().await;
    tokio::time::timeout(support::raw::WAIT, server)
        .await
        .expect("the server stops")
        .expect("join")
        .expect("ok");
    assert!(agent.is_disposed());
    assert!(ctx.get(AGENTS).is_none(), "the composition is disposed");
}

#[tokio::test]
async fn the_shutdown_token_stops_a_busy_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, observed) = composition();
    let opts = options(dir.path());
    let stop = opts.shutdown.clone();
    let (mut client, server) = start(&ctx, opts);
    client.initialize(json!({})).await;
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 60}}})).await;
    eventually("the slow call to start", || observed.runs.load(Ordering::SeqCst) == 1).await;
    let agent = the_agent(&ctx);
    stop.cancel();
    tokio::time::timeout(support::raw::WAIT, server)
        .await
        .expect("the server stops")
        .expect("join")
        .expect("ok");
    assert_eq!(observed.aborted.load(Ordering::SeqCst), 1, "the running call was aborted");
    assert!(agent.is_disposed());
}

fn ask_for(ctx: &Context, tool: &'static str) {
    let registry = ctx.get(TOOLS).expect("tools");
    let _listener = registry.on_pre_execute(
        Arc::new(move |call: &ToolCall| {
            let decision =
                (call.name == tool).then(|| Decision::Ask { reason: Some("policy says ask".into()) });
            Box::pin(async move { Ok(decision) })
        }),
        false,
    );
}

#[tokio::test]
async fn approvals_are_elicited_from_clients_that_support_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    ctx.load_default::<ApprovalPlugin>().expect("approval");
    ask_for(&ctx, "echo");
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({"elicitation": {"form": {}}})).await;
    for (id, action, expected) in [
        (1, "accept", "hi"),
        (2, "decline", "Error: the user rejected tool \"echo\""),
        (3, "cancel", "Error: approval for tool \"echo\" was cancelled"),
    ] {
        client.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}})).await;
        let ask = client.until(|m| m["method"] == json!("elicitation/create")).await;
        assert_eq!(
            ask["params"]["message"],
            json!(
                "Allow tool \"echo\" to run once?\n\nArguments: {\"text\":\"hi\"}\nReason: policy says ask\n\n\
                 Accept to allow it once; decline to refuse."
            )
        );
        assert_eq!(ask["params"]["requestedSchema"]["type"], json!("object"));
        client.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": action}})).await;
        let result = client.response(json!(id)).await;
        assert_eq!(texts(&result), [expected]);
    }

    // A client without elicitation: no channel.
    let (mut plain, _server) = start(&ctx, options(dir.path()));
    plain.initialize(json!({})).await;
    let refused = plain.call(1, "echo", json!({"text": "hi"})).await;
    assert_eq!(
        texts(&refused),
        ["Error: tool \"echo\" requires approval, but no approval channel is available"]
    );
}

#[tokio::test]
async fn calls_of_one_session_run_one_at_a_time_in_arrival_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, observed) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 0.5}}})).await;
    eventually("the slow call to start", || observed.runs.load(Ordering::SeqCst) == 1).await;
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "second"}}})).await;
    let first = client.until(|m| m.get("result").is_some()).await;
    assert_eq!(first["id"], json!(1), "the echo waited for the slow call");
    let second = client.response(json!(2)).await;
    assert_eq!(texts(&second), ["second"]);

    // A queued call cancelled before its turn never runs.
    client.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 60}}})).await;
    eventually("the long call to start", || observed.runs.load(Ordering::SeqCst) == 2).await;
    client.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 60}}})).await;
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}))
        .await;
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}))
        .await;
    let after = client.call(5, "echo", json!({"text": "after"})).await;
    assert_eq!(texts(&after), ["after"]);
    assert_eq!(observed.runs.load(Ordering::SeqCst), 2, "the cancelled queued call never ran");
}

/// The real bash tool over a local executor (the fakes cannot print while they run).
mod real_bash {
    use std::sync::Arc;

    use dsh_bash_local::{LocalBashConfig, LocalBashExecutor};
    use dsh_core::plugins::{AgentsPlugin, NoConfig, SystemPromptPlugin, ToolsPlugin};
    use dsh_core::{Context, Disposer, Plugin, PluginError, PluginScope};
    use dsh_shell::{SHELL, ShellEnvPlugin, ShellExecutor};
    use dsh_subprocess::SubprocessService;
    use dsh_tool_bash::ToolBash;

    /// A subprocess service and the local `bash -c` executor over it.
    struct LocalShell;

    impl Plugin for LocalShell {
        const NAME: &'static str = "@test/local-shell";
        const SHORT_NAME: &'static str = "local-shell";
        type Deps = ();
        type Config = NoConfig;
        type Validated = ();

        fn validate(NoConfig {}: NoConfig) -> Result<(), dsh_core::ConfigError> {
            Ok(())
        }

        fn apply(scope: &mut PluginScope, (): (), (): &()) -> Result<(), PluginError> {
            let service = SubprocessService::new();
            let disposed = Arc::clone(&service);
            scope.add(Disposer::new_async(move || async move { disposed.dispose().await }));
            let executor =
                LocalBashExecutor::new(LocalBashConfig::default(), service).map_err(PluginError::config)?;
            let executor: Arc<dyn ShellExecutor> = Arc::new(executor);
            scope.provide(SHELL, executor)
        }
    }

    pub fn composition() -> Context {
        let ctx = Context::new();
        ctx.load_default::<ToolsPlugin>().expect("tools");
        ctx.load_default::<SystemPromptPlugin>().expect("prompt");
        ctx.load_default::<AgentsPlugin>().expect("agents");
        ctx.load_default::<LocalShell>().expect("local shell");
        ctx.load_default::<ShellEnvPlugin>().expect("shell env");
        ctx.load_default::<ToolBash>().expect("bash tool");
        ctx
    }
}

#[tokio::test]
async fn progress_carries_the_running_commands_latest_output_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = real_bash::composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client.initialize(json!({})).await;
    let response = client
        .request(
            1,
            "tools/call",
            json!({
                "name": "bash",
                "arguments": {"command": "echo 'step 1'; sleep 3; echo done", "description": "steps"},
                "_meta": {"progressToken": "p-out"},
            }),
        )
        .await;
    assert_eq!(texts(&response), ["step 1\ndone\n"]);
    let messages: Vec<&str> = client
        .seen
        .iter()
        .filter(|m| m["method"] == json!("notifications/progress"))
        .filter_map(|m| m["params"]["message"].as_str())
        .collect();
    assert!(
        messages.iter().any(|m| m.starts_with("bash: running for ") && m.ends_with("s \u{2014} step 1")),
        "a progress message shows the latest output line: {messages:?}"
    );
    ctx.dispose().await;
}

/// The `_meta` a 2026-07-28 request carries in place of `initialize`.
fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// A 2026-07-28 `tools/call` (no `initialize` before it).
fn modern_call(id: i64, name: &str, arguments: Value, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": modern_meta(capabilities)}})
}

#[tokio::test]
async fn discover_offers_2026_07_28_and_the_connection_is_the_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    let (mut client, _server) = start(&ctx, options(dir.path()));
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta(json!({}))}}))
        .await;
    let discovered = client.response(json!(1)).await;
    let versions = discovered["result"]["supportedVersions"].as_array().expect("supportedVersions").clone();
    assert!(versions.contains(&json!("2026-07-28")), "{discovered}");
    assert!(versions.contains(&json!("2025-11-25")), "{discovered}");
    assert!(discovered["result"]["capabilities"]["tools"].is_object(), "{discovered}");

    // No `initialize`: each request carries its revision; the connection is one session.
    client.send(modern_call(2, "echo", json!({"text": "first"}), json!({}))).await;
    let first = client.response(json!(2)).await;
    assert_eq!(texts(&first), ["first"], "{first}");
    assert_eq!(first["result"]["resultType"], json!("complete"), "{first}");
    let agent = the_agent(&ctx);
    client.send(modern_call(3, "echo", json!({"text": "second"}), json!({}))).await;
    assert_eq!(texts(&client.response(json!(3)).await), ["second"]);
    assert!(Arc::ptr_eq(&agent, &the_agent(&ctx)), "one agent for the connection's requests");

    // A request naming a revision the server does not speak is refused with the versions it does.
    let mut bad = modern_call(4, "echo", json!({"text": "x"}), json!({}));
    bad["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    client.send(bad).await;
    let refused = client.response(json!(4)).await;
    assert_eq!(refused["error"]["code"], json!(-32022), "{refused}");
}

#[tokio::test]
async fn approvals_come_back_as_input_required_rounds_under_2026_07_28() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ctx, _) = composition();
    ctx.load_default::<ApprovalPlugin>().expect("approval");
    ask_for(&ctx, "echo");
    let (mut client, _server) = start(&ctx, options(dir.path()));
    let form = json!({"elicitation": {"form": {}}});
    let mut id = 0;
    for (action, expected) in [
        ("accept", "hi"),
        ("decline", "Error: the user rejected tool \"echo\""),
        ("cancel", "Error: approval for tool \"echo\" was cancelled"),
    ] {
        id += 1;
        client.send(modern_call(id, "echo", json!({"text": "hi"}), form.clone())).await;
        // The question is the call's result, not a request of the server's.
        let asked = client.next().await.expect("an answer");
        assert_eq!(asked["id"], json!(id), "no server request comes first: {asked}");
        let result = &asked["result"];
        assert_eq!(result["resultType"], json!("input_required"), "{asked}");
        let requests = result["inputRequests"].as_object().expect("inputRequests");
        assert_eq!(requests.len(), 1, "{asked}");
        let (key, question) = requests.iter().next().expect("one question");
        assert_eq!(question["method"], json!("elicitation/create"), "{asked}");
        assert_eq!(
            question["params"]["message"],
            json!(
                "Allow tool \"echo\" to run once?\n\nArguments: {\"text\":\"hi\"}\nReason: policy says ask\n\n\
                 Accept to allow it once; decline to refuse."
            )
        );
        let state = result["requestState"].as_str().expect("requestState").to_owned();
        // The call again, with the answer and the state it was given.
        id += 1;
        let mut again = modern_call(id, "echo", json!({"text": "hi"}), form.clone());
        again["params"]["inputResponses"] = json!({ key.clone(): {"action": action} });
        again["params"]["requestState"] = json!(state);
        client.send(again).await;
        let answered = client.response(json!(id)).await;
        assert_eq!(texts(&answered), [expected], "{answered}");
        assert_eq!(answered["result"]["resultType"], json!("complete"), "{answered}");
        // The state was for that call only: it is spent.
        id += 1;
        let mut stale = modern_call(id, "echo", json!({"text": "hi"}), form.clone());
        stale["params"]["requestState"] = json!(state);
        client.send(stale).await;
        let refused = client.response(json!(id)).await;
        assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");
    }

    // A connection whose client declared no elicitation has no channel.
    let (mut plain, _server) = start(&ctx, options(dir.path()));
    plain.send(modern_call(1, "echo", json!({"text": "hi"}), json!({}))).await;
    let refused = plain.response(json!(1)).await;
    assert_eq!(
        texts(&refused),
        ["Error: tool \"echo\" requires approval, but no approval channel is available"]
    );
}
