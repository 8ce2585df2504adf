//! `--help` of each subcommand says what it reads and prints, then shows its own options
//! before the composition options every subcommand shares; a command line clap refuses is one
//! line on stderr with the `--help` to read.

use super::harness::run;

/// The index of the line that is exactly `heading`, in `text`.
fn heading_at(text: &str, heading: &str) -> usize {
    text.lines().position(|l| l == heading).unwrap_or_else(|| panic!("no {heading:?} in:\n{text}"))
}

/// The index of the first line that names `option`.
fn option_at(text: &str, option: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().starts_with(option) || l.contains(&format!(", {option}")))
        .unwrap_or_else(|| panic!("no {option} in:\n{text}"))
}

#[test]
fn each_subcommands_help_shows_its_own_options_before_the_shared_ones() {
    let shared = "Composition options (any subcommand, before or after it):";
    for (subcommand, own) in [("call", "--json"), ("mcp", "--http"), ("schema", "--format")] {
        let out = run(&[subcommand, "--help"]);
        assert_eq!(out.code, Some(0), "{out:?}");
        let text = &out.stdout;
        let own_at = option_at(text, own);
        let shared_at = heading_at(text, shared);
        assert!(own_at < shared_at, "{subcommand}: {own} comes before the shared options:\n{text}");
        assert!(
            option_at(text, "--sandbox") > shared_at,
            "{subcommand}: --sandbox is a shared option:\n{text}"
        );
    }
}

#[test]
fn batch_help_describes_its_input_and_output_lines() {
    let out = run(&["batch", "--help"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let text = &out.stdout;
    assert!(text.contains("Input (stdin): JSON Lines, one request per line"), "{text}");
    assert!(
        text.contains(r#"{"tool":"bash","args":{"command":"pwd","description":"Show cwd"},"session":"s1""#),
        "{text}"
    );
    assert!(text.contains("Output (stdout): one JSON line per request"), "{text}");
    assert!(text.contains(r#""id":1,"notices":[]}"#), "{text}");
    // Before the options, where a reader starts.
    let formats_at = text.lines().position(|l| l.starts_with("Input (stdin)")).expect("the input format");
    assert!(formats_at < heading_at(text, "Options:"), "{text}");
}

#[test]
fn call_and_doctor_help_say_what_they_print_and_how_they_exit() {
    let call = run(&["call", "--help"]).stdout;
    assert!(call.contains("Output: the model-facing text, byte for byte"), "{call}");
    assert!(call.contains("Exit status: 0, 1 when the result is an error"), "{call}");
    let doctor = run(&["doctor", "--help"]).stdout;
    assert!(doctor.contains("Exit status: 0 ok, 3 degraded, 1 unusable"), "{doctor}");
}

#[test]
fn usage_errors_are_one_line_with_the_help_to_read() {
    let out = run(&["call", "--bogus", "bash", "{}"]);
    let line = out.assert_usage_error();
    assert!(line.starts_with("dsh-bash: unexpected argument '--bogus' found"), "{line}");
    assert!(line.ends_with("(see `dsh-bash call --help`)"), "{line}");

    let out = run(&["call"]);
    let line = out.assert_usage_error();
    assert!(line.contains("the following required arguments were not provided"), "{line}");
    assert!(line.ends_with("(see `dsh-bash call --help`)"), "{line}");

    let out = run(&["--sandbox", "nope", "doctor"]);
    let line = out.assert_usage_error();
    assert!(line.contains("invalid value 'nope' for '--sandbox <MODE>'"), "{line}");

    let out = run(&["nope"]);
    let line = out.assert_usage_error();
    assert!(line.contains("unrecognized subcommand 'nope'"), "{line}");
    assert!(line.ends_with("(see `dsh-bash --help`)"), "{line}");
}
