//! A newline-delimited JSON-RPC client over an in-memory pipe, for protocol-level tests.

#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct RawClient {
    write: Option<WriteHalf<DuplexStream>>,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    /// Messages read while waiting for something else.
    pub seen: Vec<Value>,
}

impl RawClient {
    pub fn new(stream: DuplexStream) -> Self {
        let (read, write) = tokio::io::split(stream);
        Self { write: Some(write), lines: BufReader::new(read).lines(), seen: Vec::new() }
    }

    pub async fn send_raw(&mut self, line: &[u8]) {
        let write = self.write.as_mut().expect("open");
        write.write_all(line).await.expect("write");
        write.write_all(b"\n").await.expect("write");
        write.flush().await.expect("flush");
    }

    pub async fn send(&mut self, message: Value) {
        self.send_raw(message.to_string().as_bytes()).await;
    }

    /// Closes our end of the input (the server sees EOF).
    pub async fn close_input(&mut self) {
        if let Some(mut write) = self.write.take() {
            let _ = write.shutdown().await;
        }
    }

    /// The next message from the server.
    pub async fn next(&mut self) -> Option<Value> {
        let line =
            tokio::time::timeout(WAIT, self.lines.next_line()).await.expect("a message in time").ok()??;
        Some(serde_json::from_str(&line).expect("the server writes JSON lines"))
    }

    /// Reads until the response (or error) with `id`; everything else is kept in `seen`.
    pub async fn response(&mut self, id: Value) -> Value {
        loop {
            let message = self.next().await.expect("the server is still writing");
            if message.get("id") == Some(&id) && message.get("method").is_none() {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// The first message, already seen or read now, that satisfies `pred`; others are kept in
    /// `seen`.
    pub async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.seen.iter().position(&pred) {
            return self.seen.remove(at);
        }
        loop {
            let message = self.next().await.expect("the server is still writing");
            if pred(&message) {
                return message;
            }
            self.seen.push(message);
        }
    }

    pub async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })).await;
        self.response(json!(id)).await
    }

    /// `initialize` + `notifications/initialized` with the given client capabilities.
    pub async fn initialize(&mut self, capabilities: Value) -> Value {
        let result = self
            .request(
                0,
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities,
                    "clientInfo": { "name": "raw-test-client", "version": "0" }
                }),
            )
            .await;
        self.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
        result
    }

    pub async fn call(&mut self, id: i64, name: &str, arguments: Value) -> Value {
        self.request(id, "tools/call", json!({ "name": name, "arguments": arguments })).await
    }
}

/// The joined text of a call result's content.
pub fn texts(response: &Value) -> Vec<String> {
    response["result"]["content"]
        .as_array()
        .map(|blocks| blocks.iter().filter_map(|b| b["text"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}
