//! The stdio server: newline-delimited JSON-RPC over a byte stream, one MCP session.
//!
//! The line reader is ours rather than the SDK's so that every bad input gets a JSON-RPC
//! answer and the session goes on: unparsable JSON → `-32700`; a non-object or a message
//! without a method → `-32600`; a request whose parameters do not fit its method → `-32602`
//! with the request's id; a line longer than [`McpOptions::max_message_bytes`] → `-32600`
//! (discarded without buffering it). Notifications are never answered, as JSON-RPC requires.
//! Unknown methods reach the server and get `-32601`.

// `logging/setLevel` is deprecated by SEP-2577; see the server module.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, InitializeRequestParams,
    JsonRpcMessage, JsonRpcRequest, PaginatedRequestParams, ServerJsonRpcMessage, SetLevelRequestParams,
};
use rmcp::transport::Transport;
use rmcp::{RoleServer, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use dsh_core::Context;

use crate::options::McpOptions;
use crate::order::Ordered;
use crate::server::{Home, McpServer};
use crate::session::Shared;
use crate::shutdown::shutdown_requested;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

type SharedWriter<W> = Arc<Mutex<W>>;

/// Serves the composition over the process's stdin/stdout until the client closes stdin or
/// a shutdown is requested; then ends the session and disposes the composition.
///
/// A client that closes stdin (or dies) is gone: its calls are aborted at once, and this
/// returns once the session's processes are killed and awaited (an aborted call's answer is
/// still written, for a client that only closed its end of stdin).
///
/// Stdin and stdout that are pipes are read and written through the runtime's event loop
/// (see [`crate::stdio_streams`]). Anything else is read on a blocking thread that ends only
/// when stdin does: after a shutdown with the client still connected, end the runtime with
/// `shutdown_timeout` (or exit) instead of dropping it, or the process lingers until the
/// client closes its end.
pub async fn serve_stdio(ctx: Context, options: McpOptions) -> anyhow::Result<()> {
    let (stdin, stdout) = crate::stdio_streams::stdio_streams();
    serve_io(ctx, options, stdin, stdout).await
}

/// [`serve_stdio`] over any byte streams (tests, embedding).
pub async fn serve_io<R, W>(ctx: Context, options: McpOptions, read: R, write: W) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared::new(ctx.clone(), options.clone()));
    let server = McpServer::new(shared, Home::Connection);
    let slot = server.session_slot();
    let input_ended = CancellationToken::new();
    let lines = LineTransport::new(read, write, options.max_message_bytes, input_ended.clone());
    let transport = Ordered::new(lines);
    let link = transport.link();
    // The end of the input ends the session at once (its calls aborted, its processes killed);
    // the SDK meanwhile drains the answers of the calls that were running.
    let teardown = tokio::spawn({
        let link = Arc::clone(&link);
        async move {
            input_ended.cancelled().await;
            link.close().await;
        }
    });
    let ct = CancellationToken::new();
    let shutdown = shutdown_requested(&options);
    tokio::pin!(shutdown);
    let outcome = tokio::select! {
        served = server.serve_with_ct(transport, ct.clone()) => match served {
            Ok(running) => {
                let waiting = running.waiting();
                tokio::pin!(waiting);
                tokio::select! {
                    quit = &mut waiting => quit.map(|_| ()).map_err(anyhow::Error::from),
                    _ = &mut shutdown => {
                        ct.cancel();
                        waiting.await.map(|_| ()).map_err(anyhow::Error::from)
                    }
                }
            }
            // The client went away before initializing: nothing was started.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
            Err(error) => Err(anyhow::Error::from(error)),
        },
        _ = &mut shutdown => {
            ct.cancel();
            Ok(())
        }
    };
    // Joins the teardown when the input ended (the reader's end also cancels it when the
    // transport closed first, so the task never outlives the server).
    link.close().await;
    drop(teardown);
    if let Some(session) = slot.get().cloned() {
        session.close().await;
    }
    ctx.dispose().await;
    outcome
}

/// Newline-delimited JSON-RPC with bounded lines and JSON-RPC answers to bad input.
pub(crate) struct LineTransport<W> {
    rx: mpsc::Receiver<ClientJsonRpcMessage>,
    writer: SharedWriter<W>,
    reader: tokio::task::JoinHandle<()>,
}

impl<W: AsyncWrite + Unpin + Send + 'static> LineTransport<W> {
    /// Reads `read` until its end, then cancels `ended`.
    pub fn new<R: AsyncRead + Unpin + Send + 'static>(
        read: R,
        write: W,
        max_line: usize,
        ended: CancellationToken,
    ) -> Self {
        let writer = Arc::new(Mutex::new(write));
        let (tx, rx) = mpsc::channel(64);
        let reading = read_messages(read, tx, Arc::clone(&writer), max_line);
        let reader = tokio::spawn(async move {
            let _ended = ended.drop_guard();
            reading.await;
        });
        Self { rx, writer, reader }
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> Transport<RoleServer> for LineTransport<W> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = Arc::clone(&self.writer);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            write_line(&writer, &line).await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.rx.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.writer.lock().await.flush().await
    }
}

async fn write_line<W: AsyncWrite + Unpin>(writer: &Mutex<W>, line: &[u8]) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    writer.write_all(line).await?;
    writer.flush().await?;
    drop(writer);
    crate::stdio_streams::answer_written();
    Ok(())
}

async fn reply<W: AsyncWrite + Unpin>(writer: &Mutex<W>, error: Value) {
    let mut line = error.to_string().into_bytes();
    line.push(b'\n');
    if let Err(error) = write_line(writer, &line).await {
        tracing::debug!(%error, "could not answer a bad message");
    }
}

fn error_message(id: Value, code: i64, message: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// Reads lines of at most `max_line` bytes; passes parsed messages on and answers bad ones.
async fn read_messages<R, W>(
    read: R,
    tx: mpsc::Sender<ClientJsonRpcMessage>,
    writer: SharedWriter<W>,
    max_line: usize,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    let mut oversized = false;
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(error) => {
                tracing::warn!(%error, "reading the MCP input failed");
                return;
            }
        };
        if buf.is_empty() {
            // End of input; a trailing line without its newline is incomplete and dropped.
            return;
        }
        let (chunk, complete) = match buf.iter().position(|&b| b == b'\n') {
            Some(end) => (&buf[..end], true),
            None => (buf, false),
        };
        if !oversized {
            if line.len() + chunk.len() > max_line {
                oversized = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = chunk.len() + usize::from(complete);
        reader.consume(used);
        if !complete {
            continue;
        }
        if std::mem::take(&mut oversized) {
            let message = format!("Invalid Request: a message may hold at most {max_line} bytes");
            reply(&writer, error_message(Value::Null, INVALID_REQUEST, message)).await;
            continue;
        }
        let message = std::mem::take(&mut line);
        match parse_line(&message) {
            Parsed::Message(message) => {
                if tx.send(*message).await.is_err() {
                    return;
                }
            }
            Parsed::Reply(error) => reply(&writer, error).await,
            Parsed::Skip => {}
        }
    }
}

/// A request for a method we serve whose parameters do not fit it. The SDK would take it
/// for a custom method and answer "method not found"; the truth is "invalid params".
fn misfit_params(message: &ClientJsonRpcMessage) -> Option<Value> {
    let JsonRpcMessage::Request(request) = message else { return None };
    let ClientRequest::CustomRequest(custom) = &request.request else { return None };
    let params = custom.params.clone().unwrap_or(Value::Null);
    let detail = match custom.method.as_str() {
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err(),
        "initialize" => serde_json::from_value::<InitializeRequestParams>(params).err(),
        "tools/list" => serde_json::from_value::<Option<PaginatedRequestParams>>(params).err(),
        "logging/setLevel" => serde_json::from_value::<SetLevelRequestParams>(params).err(),
        _ => return None,
    };
    let message = match detail {
        Some(detail) => format!("Invalid params for \"{}\": {detail}", custom.method),
        None => format!("Invalid params for \"{}\"", custom.method),
    };
    let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
    Some(error_message(id, INVALID_PARAMS, message))
}

/// A well-formed `tools/call` request, read without the SDK's general parse (which tries
/// each kind of request in turn until `tools/call`, about twenty, each failure an error
/// value). `None` for anything else, or anything this does not read the way the general parse
/// would: that parse then decides.
fn tool_call(raw: &[u8]) -> Option<ClientJsonRpcMessage> {
    let shape = serde_json::from_slice::<Shape>(raw).ok()?;
    if !shape.is_tool_call_request() {
        return None;
    }
    let call = serde_json::from_slice::<ToolCallLine>(raw).ok()?;
    let ToolCallParams { meta, name, arguments, input_responses, request_state } = call.params;
    let mut params = CallToolRequestParams::new(name);
    if let Some(arguments) = arguments {
        params = params.with_arguments(arguments);
    }
    if let Some(responses) = input_responses {
        params = params.with_input_responses(responses);
    }
    if let Some(state) = request_state {
        params = params.with_request_state(state);
    }
    let mut request = CallToolRequest::new(params);
    // Where the SDK's reading puts `_meta` (and so the progress token): in the extensions,
    // not in the parameters.
    if let Some(meta) = meta {
        request.extensions.insert(rmcp::model::RequestMetaObject::from(meta));
    }
    Some(JsonRpcMessage::Request(JsonRpcRequest {
        jsonrpc: call.jsonrpc,
        id: call.id,
        request: ClientRequest::CallToolRequest(request),
    }))
}

/// A `tools/call` request line as the SDK's types read it, flattened by hand: the SDK's own
/// types flatten the request into the message and the parameters beside `_meta` (serde's
/// `flatten`), which buffers the whole line and then the parameters before reading either.
/// Unknown keys are ignored, as there; a duplicate key, a wrong type or a missing member is
/// an error, as there (and the general parse then answers it).
#[derive(serde::Deserialize)]
struct ToolCallLine {
    jsonrpc: rmcp::model::JsonRpcVersion2_0,
    id: rmcp::model::RequestId,
    #[serde(rename = "method")]
    _method: rmcp::model::CallToolRequestMethod,
    params: ToolCallParams,
}

/// The members of `tools/call`'s parameters, `_meta` included.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCallParams {
    #[serde(rename = "_meta", default)]
    meta: Option<rmcp::model::JsonObject>,
    name: std::borrow::Cow<'static, str>,
    #[serde(default)]
    arguments: Option<rmcp::model::JsonObject>,
    #[serde(default)]
    input_responses: Option<rmcp::model::InputResponses>,
    #[serde(default)]
    request_state: Option<String>,
}

/// Which of the keys that decide a message's kind an object has (present, whatever their
/// value, as the SDK counts them), and whether its method is `tools/call`.
#[derive(Default)]
struct Shape {
    tool_call: bool,
    id: bool,
    result: bool,
    error: bool,
}

impl Shape {
    /// A request (a method and an id, neither a result nor an error) for `tools/call`.
    fn is_tool_call_request(&self) -> bool {
        self.tool_call && self.id && !self.result && !self.error
    }
}

impl<'de> serde::Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Shape;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON-RPC message object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
                let mut shape = Shape::default();
                let mut methods = 0;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "method" => {
                            methods += 1;
                            let method = map.next_value::<Value>()?;
                            shape.tool_call = methods == 1 && method == "tools/call";
                            continue;
                        }
                        "id" => shape.id = true,
                        "result" => shape.result = true,
                        "error" => shape.error = true,
                        _ => {}
                    }
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(shape)
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

enum Parsed {
    Message(Box<ClientJsonRpcMessage>),
    Reply(Value),
    Skip,
}

/// The JSON-RPC error a message (an HTTP request body) gets when it is no usable message:
/// the answer this server gives the same line over stdio, and a parse error for an empty
/// body. `None` for a message to pass on (or a malformed notification, never answered).
pub(crate) fn refusal(raw: &[u8]) -> Option<Value> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        let message = "Parse error: the message is empty".to_owned();
        return Some(error_message(Value::Null, PARSE_ERROR, message));
    }
    match parse_line(raw) {
        Parsed::Reply(error) => Some(error),
        Parsed::Message(_) | Parsed::Skip => None,
    }
}

fn parse_line(raw: &[u8]) -> Parsed {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let raw = raw.strip_prefix(UTF8_BOM).unwrap_or(raw);
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Skip;
    }
    if let Some(call) = tool_call(raw) {
        return Parsed::Message(Box::new(call));
    }
    let error = match serde_json::from_slice::<ClientJsonRpcMessage>(raw) {
        Ok(message) => {
            return misfit_params(&message).map_or(Parsed::Message(Box::new(message)), Parsed::Reply);
        }
        Err(error) => error,
    };
    let value: Value = match serde_json::from_slice(raw) {
        Ok(value) => value,
        Err(parse) => {
            return Parsed::Reply(error_message(Value::Null, PARSE_ERROR, format!("Parse error: {parse}")));
        }
    };
    let Value::Object(map) = &value else {
        let message = "Invalid Request: expected one JSON-RPC message object".to_owned();
        return Parsed::Reply(error_message(Value::Null, INVALID_REQUEST, message));
    };
    let id = map.get("id").filter(|id| id.is_string() || id.is_number()).cloned();
    let method = map.get("method").and_then(Value::as_str);
    let version_ok = map.get("jsonrpc") == Some(&json!("2.0"));
    match (method, id) {
        (Some(_), Some(id)) if !version_ok => Parsed::Reply(error_message(
            id,
            INVALID_REQUEST,
            "Invalid Request: \"jsonrpc\" must be \"2.0\"".into(),
        )),
        (Some(method), Some(id)) => Parsed::Reply(error_message(
            id,
            INVALID_PARAMS,
            format!("Invalid params for \"{method}\": {error}"),
        )),
        (Some(_), None) if map.contains_key("id") => Parsed::Reply(error_message(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: \"id\" must be a string or a number".into(),
        )),
        // A malformed notification: JSON-RPC never answers notifications.
        (Some(method), None) => {
            tracing::debug!(%method, %error, "ignoring a malformed notification");
            Parsed::Skip
        }
        // A reply we cannot use: answering replies could echo forever.
        (None, _) if map.contains_key("result") || map.contains_key("error") => Parsed::Skip,
        (None, id) => Parsed::Reply(error_message(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "Invalid Request: missing \"method\"".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn general(raw: &str) -> ClientJsonRpcMessage {
        serde_json::from_str(raw).expect("the general parse reads it")
    }

    #[test]
    fn a_tool_call_reads_as_the_general_parse_reads_it() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bash","arguments":{"command":"true","description":"t"}}}"#,
            r#"{"method":"tools/call","params":{"arguments":{"n":1.5e3,"big":18446744073709551615,"s":"\u00e9\n","a":[null,{}]},"name":"b\u0061sh","_meta":{"progressToken":"p-1","x":[1]}},"id":"abc","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":-3,"method":"tools/call","params":{"name":"job_list"},"extra":{"ignored":true}}"#,
            r#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"bash","arguments":{},"_meta":{"progressToken":9}}}"#,
            r#"{"params":{"unknown":[1,{"a":2}],"_meta":null,"arguments":null,"name":"bash"},"id":"x","method":"tools/call","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bash","arguments":{"k":-1},"inputResponses":{"r":{"answer":true}},"requestState":"opaque"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","_meta":{}}}"#,
        ];
        for line in lines {
            let fast = tool_call(line.as_bytes()).expect("read by the fast path");
            let general = general(line);
            assert_eq!(format!("{fast:?}"), format!("{general:?}"), "{line}");
            let (fast, general) =
                (serde_json::to_value(&fast).unwrap(), serde_json::to_value(&general).unwrap());
            assert_eq!(fast, general, "{line}");
        }
    }

    #[test]
    fn anything_but_a_well_formed_tool_call_is_left_to_the_general_parse() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash"},"error":null}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":["tools/call"],"params":{"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"bash"}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash"}}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","name":"job_list"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","_meta":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        ];
        for line in lines {
            assert!(tool_call(line.as_bytes()).is_none(), "{line}");
        }
    }
}
