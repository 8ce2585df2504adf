//! The composition file: TOML with an optional `plugins = [...]` list and one table per plugin.
//!
//! ```toml
//! plugins = ["tools", "system-prompt", "agent", "subprocess", "bash-local", "shell-env", "tool-bash"]
//!
//! [bash-local]
//! graceMs = 200
//! ```

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// A parsed composition file, names as written (not yet resolved against the catalog).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompositionFile {
    /// Replaces the default plugin set when present.
    pub plugins: Option<Vec<String>>,
    /// `(plugin name, config)` in file order.
    pub tables: Vec<(String, Value)>,
}

/// Reads and parses `path`.
pub fn read(path: &Path) -> anyhow::Result<CompositionFile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("config {}", path.display()))?;
    parse(&text).with_context(|| format!("config {}", path.display()))
}

/// Parses composition TOML.
pub fn parse(text: &str) -> anyhow::Result<CompositionFile> {
    let document: toml::Table =
        toml::from_str(text).map_err(|e| anyhow::anyhow!(one_line_toml_error(text, &e)))?;
    let mut file = CompositionFile::default();
    for (key, value) in document {
        if key == "plugins" {
            let toml::Value::Array(items) = value else {
                bail!("`plugins` must be an array of plugin names");
            };
            let mut names = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    toml::Value::String(name) => names.push(name),
                    other => bail!("`plugins` must be an array of plugin names (found {})", other.type_str()),
                }
            }
            file.plugins = Some(names);
            continue;
        }
        let toml::Value::Table(table) = value else {
            bail!("`{key}` must be a table of settings for plugin \"{key}\" (found {})", value.type_str());
        };
        let json = serde_json::to_value(table).with_context(|| format!("[{key}]"))?;
        file.tables.push((key, json));
    }
    Ok(file)
}

/// `TOML parse error at line L, column C: <message>` — the library's own rendering spans lines.
fn one_line_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().replace('\n', " ");
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("TOML parse error at line {line}, column {column}: {message}")
        }
        None => format!("TOML parse error: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_and_plugin_list() {
        let file = parse("plugins = [\"tools\", \"agent\"]\n[bash-local]\ngraceMs = 200\n[tool-bash]\nenableRunInBackground = false\n")
            .expect("parses");
        assert_eq!(file.plugins, Some(vec!["tools".to_owned(), "agent".to_owned()]));
        assert_eq!(
            file.tables,
            vec![
                ("bash-local".to_owned(), json!({"graceMs": 200})),
                ("tool-bash".to_owned(), json!({"enableRunInBackground": false})),
            ]
        );
    }

    #[test]
    fn errors_are_one_line() {
        let err = parse("[bash-local]\ngraceMs = \n").expect_err("bad toml").to_string();
        assert!(err.starts_with("TOML parse error at line 2, column "), "{err}");
        assert!(!err.contains('\n'), "{err}");
        let err = parse("plugins = \"tools\"").expect_err("not an array").to_string();
        assert_eq!(err, "`plugins` must be an array of plugin names");
        let err = parse("graceMs = 200").expect_err("not a table").to_string();
        assert_eq!(err, "`graceMs` must be a table of settings for plugin \"graceMs\" (found integer)");
    }
}
