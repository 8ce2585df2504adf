//! What the HTTP tests share: one parsed HTTP response and the server's address.

use serde_json::{Value, json};

/// One HTTP response.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of the body: one JSON document, or the `data:` lines of an SSE
    /// stream.
    pub(crate) fn messages(&self) -> Vec<Value> {
        if self.body.trim_start().starts_with('{') {
            return vec![serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))];
        }
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    }

    /// The response to request `id`, if the body holds it.
    pub(crate) fn response(&self, id: i64) -> Option<Value> {
        self.messages().into_iter().find(|m| m["id"] == json!(id) && m.get("method").is_none())
    }
}

/// The `host:port` of the server's start line.
pub(crate) fn authority(start_line: &str) -> String {
    let url =
        start_line.strip_prefix("dsh-bash: serving MCP at http://").unwrap_or_else(|| panic!("{start_line}"));
    url.split('/').next().expect("authority").to_owned()
}
