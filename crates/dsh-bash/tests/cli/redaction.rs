//! Output redaction: the values of the credentials scrubbed from commands' environment (and of
//! variables named with `--redact-env`), 8 bytes or longer, are replaced by `[redacted:NAME]`
//! in everything the model sees — the text result, the structured value, background job
//! reads, the live status line and the spill file. Commands cannot see a scrubbed variable,
//! so they print the value by other means (a file holding it).

use std::io::Read;
use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{Run, Sandbox, confining_host, output};

const SECRET: &str = "ghp_secretvalue123";
const MARKER: &str = "[redacted:GITHUB_TOKEN]";
const TOKEN_ENV: [(&str, &str); 1] = [("GITHUB_TOKEN", SECRET)];

/// `dsh-bash SWITCHES call [--json] bash {command}` in `sandbox` with `env` added.
fn call(sandbox: &Sandbox, switches: &[&str], json: bool, command: &str, env: &[(&str, &str)]) -> Run {
    let args = json!({"command": command, "description": "Print things"}).to_string();
    let mut all = switches.to_vec();
    all.push("call");
    if json {
        all.push("--json");
    }
    all.extend(["bash", &args]);
    let mut command = sandbox.command(&all);
    command.envs(env.iter().copied());
    let out = output(command, b"");
    assert_eq!(out.code, Some(0), "{out:?}");
    out
}

/// A sandbox holding `secret.txt` = `token=<SECRET>\n`.
fn with_secret_file() -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write("secret.txt", &format!("token={SECRET}\n"));
    sandbox
}

#[test]
fn a_printed_secret_is_redacted_in_the_text_and_the_structured_value() {
    let sandbox = with_secret_file();
    let command = "cat secret.txt; cat secret.txt >&2; echo \"child sees: ${GITHUB_TOKEN-unset}\"";
    let out = call(&sandbox, &[], false, command, &TOKEN_ENV);
    assert_eq!(
        out.stdout,
        format!("token={MARKER}\nchild sees: unset\n[stderr]\ntoken={MARKER}\n"),
        "the text result"
    );
    let out = call(&sandbox, &[], true, command, &TOKEN_ENV);
    assert!(!out.stdout.contains(SECRET), "no trace of the value anywhere in the JSON line: {}", out.stdout);
    let line = &out.json_lines()[0];
    assert_eq!(line["structured"]["stdout"]["text"], json!(format!("token={MARKER}\nchild sees: unset\n")));
    assert_eq!(line["structured"]["stderr"]["text"], json!(format!("token={MARKER}\n")));
    assert_eq!(line["presentResult"]["output"].as_str().map(|o| o.contains(MARKER)), Some(true), "{line}");
    // Without the variable in the harness's environment nothing is redacted.
    let out = call(&sandbox, &[], false, "cat secret.txt", &[]);
    assert_eq!(out.stdout, format!("token={SECRET}\n"));
}

#[test]
fn a_secret_written_in_two_pieces_is_still_redacted() {
    let sandbox = Sandbox::new();
    let command = format!("printf '{}'; sleep 0.05; printf '{}\\n'", &SECRET[..7], &SECRET[7..]);
    let out = call(&sandbox, &[], false, &command, &TOKEN_ENV);
    assert_eq!(out.stdout, format!("{MARKER}\n"));
    // The prefix alone, at the end of the output, is released as it is.
    let prefix = format!("printf '{}'", &SECRET[..7]);
    let plain = call(&sandbox, &[], false, &prefix, &[]);
    assert!(plain.stdout.starts_with(&SECRET[..7]), "{plain:?}");
    assert_eq!(call(&sandbox, &[], false, &prefix, &TOKEN_ENV).stdout, plain.stdout);
}

#[test]
fn an_encoded_secret_is_not_redacted() {
    let sandbox = with_secret_file();
    let out = call(&sandbox, &[], false, &format!("printf %s '{SECRET}' | base64"), &TOKEN_ENV);
    assert_eq!(out.stdout, "Z2hwX3NlY3JldHZhbHVlMTIz\n", "only the literal bytes are found (documented)");
    let out = call(&sandbox, &[], false, &format!("printf '%s\\n' '{SECRET}' | rev"), &TOKEN_ENV);
    assert_eq!(out.stdout, "321eulavterces_phg\n");
}

#[test]
fn a_short_value_is_never_redacted() {
    let sandbox = Sandbox::new();
    let out = call(&sandbox, &[], false, "echo 'pw=1234567'", &[("DB_PASSWORD", "1234567")]);
    assert_eq!(out.stdout, "pw=1234567\n", "values under 8 bytes are left alone");
}

/// Whether `path` holds `needle`, read in pieces (the file may be large).
fn file_contains(path: &Path, needle: &[u8]) -> bool {
    let mut file = std::fs::File::open(path).expect("open spill file");
    let mut window: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).expect("read spill file");
        if n == 0 {
            return false;
        }
        window.extend_from_slice(&buf[..n]);
        if window.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        let keep = window.len().min(needle.len() - 1);
        window.drain(..window.len() - keep);
    }
}

#[test]
fn the_spill_file_of_a_256_mb_stream_is_redacted() {
    let sandbox = Sandbox::new();
    sandbox.write("secret.bin", SECRET);
    let config = sandbox.write("dsh.toml", "[bash-local]\nmaxSpillBytes = 300000000\n");
    let half = 128 * 1024 * 1024;
    let command = format!(
        "head -c {half} /dev/zero | tr '\\0' a; cat secret.bin; head -c {half} /dev/zero | tr '\\0' a"
    );
    let out = call(&sandbox, &["--config", config.to_str().expect("utf-8")], true, &command, &TOKEN_ENV);
    let line = &out.json_lines()[0];
    assert!(!out.stdout.contains(SECRET), "{}", &out.stdout[..out.stdout.len().min(500)]);
    let stdout = &line["structured"]["stdout"];
    assert_eq!(stdout["truncated"], json!(true));
    let spill = stdout["spillPath"].as_str().expect("a spill file").to_owned();
    let spill = Path::new(&spill);
    let size = std::fs::metadata(spill).expect("spill file").len();
    assert_eq!(size, 2 * half + MARKER.len() as u64, "the whole stream, the value replaced");
    assert!(file_contains(spill, format!("a{MARKER}a").as_bytes()), "the marker is in the spill file");
    assert!(!file_contains(spill, SECRET.as_bytes()), "the value is not");
    let _ = std::fs::remove_file(spill);
}

/// One `batch` run in session `s1`; the result texts, in order.
fn batch(sandbox: &Sandbox, switches: &[&str], requests: &[Value], env: &[(&str, &str)]) -> Vec<String> {
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let mut all = switches.to_vec();
    all.push("batch");
    let mut command = sandbox.command(&all);
    command.envs(env.iter().copied());
    let out = output(command, input.as_bytes());
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stdout.contains(SECRET), "{}", out.stdout);
    out.json_lines().iter().map(|l| l["content"][0]["text"].as_str().expect("text").to_owned()).collect()
}

#[test]
fn a_background_job_read_is_redacted() {
    let sandbox = with_secret_file();
    let dir = sandbox.path().to_str().expect("utf-8");
    let job = format!("cat secret.txt; printf '{}'; sleep 0.2; printf '{}\\n'", &SECRET[..7], &SECRET[7..]);
    let texts = batch(
        &sandbox,
        &[],
        &[
            json!({"tool": "bash", "session": "s1", "cwd": dir, "id": 1,
                   "args": {"command": job, "description": "Background work", "run_in_background": true}}),
            json!({"tool": "job_output", "session": "s1", "id": 2, "args": {"job_id": "bash-1", "wait": true}}),
        ],
        &TOKEN_ENV,
    );
    assert_eq!(texts[0], "started background job bash-1");
    assert_eq!(texts[1], format!("token={MARKER}\n{MARKER}\n[status: completed, exit code: 0]"));
}

#[test]
fn the_live_status_line_is_redacted() {
    let sandbox = with_secret_file();
    let args = json!({"command": "cat secret.txt; sleep 2; echo done", "description": "d"}).to_string();
    let seen = sandbox.on_terminal(&["call", "bash", &args], &TOKEN_ENV);
    assert!(!seen.contains(SECRET), "{seen:?}");
    assert!(seen.ends_with(&format!("token={MARKER}\r\ndone\r\n")), "{seen:?}");
    let status = &seen[..seen.len() - format!("token={MARKER}\r\ndone\r\n").len()];
    assert!(status.contains("token=[redacted"), "the status line showed the redacted line: {status:?}");
}

#[test]
fn redact_env_names_more_variables_and_the_config_can_turn_the_scrubbed_ones_off() {
    let sandbox = with_secret_file();
    let env = [("GITHUB_TOKEN", SECRET), ("PLAIN_SETTING", "not-a-credential")];
    let command = "cat secret.txt; echo \"$PLAIN_SETTING\"";
    let out = call(&sandbox, &[], false, command, &env);
    assert_eq!(out.stdout, format!("token={MARKER}\nnot-a-credential\n"), "only the scrubbed one by default");
    let out = call(&sandbox, &["--redact-env", "PLAIN_SETTING"], false, command, &env);
    assert_eq!(out.stdout, format!("token={MARKER}\n[redacted:PLAIN_SETTING]\n"), "the child still has it");
    let config = sandbox.write("dsh.toml", "[subprocess]\nredactScrubbed = false\n");
    let config = config.to_str().expect("utf-8");
    let out = call(&sandbox, &["--config", config], false, command, &env);
    assert_eq!(out.stdout, format!("token={SECRET}\nnot-a-credential\n"));
    let out = call(&sandbox, &["--config", config, "--redact-env", "GITHUB_TOKEN"], false, command, &env);
    assert_eq!(out.stdout, format!("token={MARKER}\nnot-a-credential\n"));
    let bad =
        sandbox.command(&["--redact-env", "A=B", "call", "bash", r#"{"command":"true","description":"d"}"#]);
    let out = output(bad, b"");
    assert_eq!(
        out.assert_usage_error(),
        r#"dsh-bash: subprocess: redactValues must hold environment variable names, got "A=B""#
    );
}

#[test]
fn confined_commands_are_redacted_too() {
    if !confining_host() {
        return;
    }
    let sandbox = Sandbox::outside_tmp();
    sandbox.write("secret.txt", &format!("token={SECRET}\n"));
    let out = call(&sandbox, &["--sandbox", "workspace-write"], false, "cat secret.txt", &TOKEN_ENV);
    assert_eq!(out.stdout, format!("token={MARKER}\n"));
}
