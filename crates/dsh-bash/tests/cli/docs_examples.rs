//! Every shell example with shown output in the README and `docs/` runs through the built
//! binary, and what it prints is compared with what the page shows, so the docs cannot drift.
//!
//! An example is a fenced block (` ```console ` or ` ```sh `) holding lines that start with
//! `$ `: each is a command, the lines up to the next `$ ` line are what it prints (stdout and
//! stderr together). In the shown output a line `...` stands for any number of lines and
//! `[..]` for any text within a line. `cargo run … --` and `target/release/dsh-bash` run the
//! binary under test, which is also first on `PATH` as `dsh-bash`; each block runs in a
//! project directory of a fresh home (`HOME`, and `DSH_HOME` below it), and a `/root/` in the
//! shown output is that home. An example that needs what a test cannot give it (an MCP
//! client, the network, another host) is marked on the line before its fence with
//! `<!-- not run: <why> -->`; an example of `--sandbox` is run where the host can confine
//! (always under CI, see `confining_host`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::harness::{Sandbox, confining_host, output};

/// One fenced example: where it is, its commands with their shown output, and why it is
/// not run (if it is not).
struct Example {
    place: String,
    steps: Vec<(String, Vec<String>)>,
    not_run: Option<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README and every page of `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The examples of one page.
fn examples(page: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(page).expect("read page");
    let name = page.strip_prefix(repo_root()).unwrap_or(page).display().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        // A fence may be indented (a block inside a list item); so is its body.
        let fence = lines[i].trim_start();
        let indent = lines[i].len() - fence.len();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or_else(|| panic!("{name}:{}: a fence that is never closed", start + 1));
        i = end + 1;
        let body: Vec<&str> = lines[start + 1..end].iter().map(|l| l.get(indent..).unwrap_or("")).collect();
        if !matches!(fence, "```console" | "```sh") || !body.iter().any(|l| l.starts_with("$ ")) {
            continue;
        }
        let not_run = start
            .checked_sub(1)
            .and_then(|p| lines[p].trim_start().strip_prefix("<!-- not run: "))
            .and_then(|r| r.strip_suffix(" -->"))
            .map(str::to_owned);
        let mut steps: Vec<(String, Vec<String>)> = Vec::new();
        for line in &body {
            match line.strip_prefix("$ ") {
                Some(command) => steps.push((command.to_owned(), Vec::new())),
                None => {
                    let (_, shown) = steps.last_mut().unwrap_or_else(|| {
                        panic!("{name}:{}: an example's first line is a `$ ` command", start + 2)
                    });
                    shown.push((*line).to_owned());
                }
            }
        }
        found.push(Example { place: format!("{name}:{}", start + 1), steps, not_run });
    }
    found
}

/// Whether `actual` matches the `shown` line, where `[..]` stands for any text.
fn line_matches(shown: &str, actual: &str) -> bool {
    let mut parts = shown.split("[..]");
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = actual.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (k, part) in parts.iter().enumerate() {
        if k + 1 == parts.len() {
            return rest.len() >= part.len() && rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether the `actual` lines match the `shown` ones, where a `...` line stands for any
/// number of lines.
fn lines_match(shown: &[String], actual: &[&str]) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => (0..=actual.len()).any(|k| lines_match(rest, &actual[k..])),
        Some((first, rest)) => {
            actual.first().is_some_and(|a| line_matches(first, a)) && lines_match(rest, &actual[1..])
        }
    }
}

/// Runs one command of an example in `project` under `home`; stdout and stderr together.
fn run_step(command: &str, home: &Path, project: &Path) -> String {
    let binary = Path::new(env!("CARGO_BIN_EXE_dsh-bash"));
    let command = command
        .replace("cargo run -q --release --bin dsh-bash --", "dsh-bash")
        .replace("target/release/dsh-bash", "dsh-bash");
    let path = format!(
        "{}:{}",
        binary.parent().expect("the binary's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut bash = Command::new("bash");
    bash.args(["-c", &format!("exec 2>&1\n{command}")])
        .env("HOME", home)
        .env("PATH", path)
        .env("DSH_HOME", home.join(".dsh"))
        .env_remove("DSH_MCP_TOKEN")
        .env_remove("RUST_LOG")
        .current_dir(project);
    output(bash, b"").stdout
}

/// The shown output of a step, with this run's home in place of `/root`.
fn expected(shown: &[String], home: &Path) -> Vec<String> {
    let home = format!("{}/", home.display());
    shown.iter().map(|l| l.trim_end().replace("/root/", &home)).collect()
}

#[test]
fn the_docs_line_matcher_knows_its_wildcards() {
    assert!(line_matches("a[..]c", "abbbc"));
    assert!(line_matches("a[..]", "a"));
    assert!(!line_matches("a[..]c", "abd"));
    assert!(!line_matches("abc", "abcd"));
    let shown = ["x".to_owned(), "...".to_owned(), "z".to_owned()];
    assert!(lines_match(&shown, &["x", "y", "y", "z"]));
    assert!(lines_match(&shown, &["x", "z"]));
    assert!(!lines_match(&shown, &["x", "y"]));
}

#[test]
fn docs_examples_print_what_the_docs_show() {
    let confining = confining_host();
    let mut ran = 0;
    let mut failures = Vec::new();
    for page in pages() {
        for example in examples(&page) {
            if let Some(reason) = &example.not_run {
                assert!(!reason.trim().is_empty(), "{}: a not-run example says why", example.place);
                continue;
            }
            if !confining && example.steps.iter().any(|(c, _)| c.contains("--sandbox")) {
                continue;
            }
            let home = Sandbox::outside_tmp();
            let project = home.path().join("project");
            std::fs::create_dir(&project).expect("project dir");
            for (command, shown) in &example.steps {
                let actual = run_step(command, home.path(), &project);
                let actual_lines: Vec<&str> = actual.trim_end().lines().map(str::trim_end).collect();
                let want = expected(shown, home.path());
                if !lines_match(&want, &actual_lines) {
                    failures.push(format!(
                        "{}: `$ {command}`\n--- shown\n{}\n--- printed\n{}",
                        example.place,
                        want.join("\n"),
                        actual_lines.join("\n")
                    ));
                }
                ran += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} docs commands printed otherwise:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran >= 5, "the docs hold examples to run ({ran} ran)");
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as
/// `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside fenced blocks).
fn anchors(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor(line));
        }
    }
    found
}

/// Every relative link of the README and `docs/` names a file that exists and, with a
/// `#fragment`, a heading of it: moving a section cannot leave a link behind.
#[test]
fn docs_links_lead_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let dir = page.parent().expect("a directory");
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.contains(char::is_whitespace) {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() { page.clone() } else { dir.join(file) };
            if !file.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
            } else if !fragment.is_empty() && !anchors(&file).iter().any(|a| a == fragment) {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
