//! `dsh-bash schema` and `dsh-bash prompt`.

use crate::harness::run;

#[test]
fn prompt_is_the_rendered_sections_and_nothing_else() {
    let out = run(&["prompt"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.starts_with("You are an AI agent powered by DeepSeek Harness."), "{}", out.stdout);
    assert!(!out.stdout.ends_with('\n'), "{:?}", out.stdout);
}

#[test]
fn schema_formats_are_pretty_json_arrays() {
    for format in ["mcp", "openai", "anthropic"] {
        let out = run(&["schema", "--format", format]);
        assert_eq!(out.code, Some(0), "{out:?}");
        let value: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
        assert!(value.is_array(), "{value}");
    }
}
