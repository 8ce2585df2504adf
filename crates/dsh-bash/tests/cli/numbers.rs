//! The model's numbers come back as JavaScript prints them: a refused `timeoutMs` quotes the
//! value `String(JSON.parse(text))` gives in `node`, for random 16–17-digit numbers and
//! integers beyond 2^53, through `batch`, `call` and MCP alike.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::harness::Sandbox;
use crate::mcp::StdioServer;

/// A small deterministic generator (xorshift64*), so a failure names a reproducible number.
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A negative number's JSON text: 16 or 17 significant digits placed around the decimal
    /// point, in plain or exponent form, or an integer of 16 to 19 digits.
    fn text(&mut self) -> String {
        let count = 16 + (self.next() % 2) as usize;
        let mut digits: String = (0..count).map(|_| char::from(b'0' + (self.next() % 10) as u8)).collect();
        digits.replace_range(0..1, &(1 + self.next() % 9).to_string());
        match self.next() % 4 {
            0 => format!("-{digits}{}", "0".repeat((self.next() % 3) as usize)),
            1 => {
                let point = 1 + (self.next() % (count as u64 - 1)) as usize;
                format!("-{}.{}", &digits[..point], &digits[point..])
            }
            2 => format!("-0.{}{digits}", "0".repeat((self.next() % 6) as usize)),
            _ => {
                let sign = if self.next().is_multiple_of(2) { "-" } else { "" };
                format!("-{}.{}e{sign}{}", &digits[..1], &digits[1..], self.next() % 300)
            }
        }
    }
}

/// The texts `node` prints for `String(JSON.parse(text))`, one per input.
fn as_node_prints(texts: &[String]) -> Vec<String> {
    let mut node = Command::new("node")
        .args(["-e", "const l=require('fs').readFileSync(0,'utf8').split('\\n').filter(Boolean);for(const t of l)console.log(String(JSON.parse(t)))"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node is needed to compute what JavaScript prints (.ci/run installs nodejs)");
    let mut stdin = node.stdin.take().expect("stdin");
    stdin.write_all(texts.join("\n").as_bytes()).expect("write to node");
    drop(stdin);
    let out = node.wait_with_output().expect("node");
    assert!(out.status.success(), "{out:?}");
    let printed: Vec<String> =
        String::from_utf8(out.stdout).expect("utf-8").lines().map(str::to_owned).collect();
    assert_eq!(printed.len(), texts.len());
    printed
}

fn args_line(number: &str) -> String {
    format!(r#"{{"command":"true","description":"d","timeoutMs":{number}}}"#)
}

fn refusal(js: &str) -> String {
    format!("Error: invalid timeoutMs: expected a positive number, got {js}")
}

fn cases() -> (Vec<String>, Vec<String>) {
    let mut numbers = Numbers(0x9E37_79B9_7F4A_7C15);
    let mut texts: Vec<String> = (0..600).map(|_| numbers.text()).collect();
    texts.extend(
        ["-904201.7709435733", "-9007199254740993", "-18446744073709551615", "-9007199254740991", "-1e21"]
            .map(str::to_owned),
    );
    let js = as_node_prints(&texts);
    (texts, js)
}

#[test]
fn refused_numbers_are_quoted_as_javascript_prints_them_through_batch_and_call() {
    let (texts, js) = cases();
    let sandbox = Sandbox::new();
    let input: String =
        texts.iter().map(|t| format!("{{\"tool\":\"bash\",\"args\":{}}}\n", args_line(t))).collect();
    let out = sandbox.run(&["batch"], &input);
    let lines: Vec<Value> = out.stdout.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(lines.len(), texts.len(), "{out:?}");
    let wrong: Vec<String> = texts
        .iter()
        .zip(&js)
        .zip(&lines)
        .filter(|((_, js), line)| line["content"][0]["text"] != json!(refusal(js)))
        .map(|((text, js), line)| format!("{text}: node {js}, got {}", line["content"][0]["text"]))
        .collect();
    assert_eq!(wrong, Vec::<String>::new());
    for (text, js) in texts.iter().zip(&js).step_by(60) {
        let out = sandbox.run(&["call", "bash", &args_line(text)], "");
        assert_eq!(out.stdout, refusal(js), "{text}");
    }
}

#[test]
fn refused_numbers_are_quoted_as_javascript_prints_them_over_mcp() {
    let (texts, js) = cases();
    let sandbox = Sandbox::new();
    let mut server = StdioServer::start(&sandbox);
    let mut wrong = Vec::new();
    // In rounds, so neither side's pipe fills while the other waits.
    let cases: Vec<(usize, (&String, &String))> = texts.iter().zip(&js).enumerate().collect();
    for round in cases.chunks(50) {
        for (i, (text, _)) in round {
            // Written as text: a client's JSON library would round the number first.
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"bash","arguments":{}}}}}"#,
                i + 10,
                args_line(text)
            );
            writeln!(server.stdin.as_mut().expect("stdin"), "{line}").expect("write");
        }
        for (i, (text, js)) in round {
            let answer = server.response(*i as i64 + 10).expect("answered");
            if answer["result"]["content"][0]["text"] != json!(refusal(js)) {
                wrong.push(format!("{text}: node {js}, got {}", answer["result"]["content"][0]["text"]));
            }
        }
    }
    assert_eq!(wrong, Vec::<String>::new());
}
