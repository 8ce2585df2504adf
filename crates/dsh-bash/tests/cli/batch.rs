//! `dsh-bash batch`.

use serde_json::json;

use crate::harness::{Sandbox, output};

#[test]
fn malformed_lines_get_error_responses_and_the_batch_goes_on() {
    let sandbox = Sandbox::new();
    let input = concat!(
        "not json\n",
        "\n",
        "[1]\n",
        "{\"id\":3,\"args\":{}}\n",
        "{\"id\":\"four\",\"tool\":\"nope\",\"sesion\":\"x\"}\n",
        "{\"tool\":\"nope\",\"cwd\":\"/tmp\",\"id\":5}\n",
        "{\"tool\":\"nope\",\"id\":6}\n",
    );
    let out = sandbox.run(&["batch"], input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    assert_eq!(lines.len(), 6, "{}", out.stdout);
    let texts: Vec<&str> = lines.iter().map(|l| l["content"][0]["text"].as_str().expect("text")).collect();
    assert!(texts[0].starts_with("Error: invalid JSON: expected ident at line 1 column 2"), "{}", texts[0]);
    assert_eq!(texts[1], "Error: invalid request: expected a JSON object");
    assert_eq!(texts[2], "Error: invalid request: missing field `tool`");
    assert!(texts[3].starts_with("Error: invalid request: unknown field `sesion`"), "{}", texts[3]);
    assert_eq!(texts[4], "Error: invalid request: \"cwd\" requires \"session\"");
    assert_eq!(texts[5], "Error: unknown tool \"nope\"");
    let ids: Vec<&serde_json::Value> = lines.iter().map(|l| &l["id"]).collect();
    assert_eq!(ids, [&json!(null), &json!(null), &json!(3), &json!("four"), &json!(5), &json!(6)]);
    for line in &lines {
        assert_eq!(line["isError"], json!(true));
        assert_eq!(line["structured"], json!(null));
        assert_eq!(line["presentCall"], json!(null));
        assert_eq!(line["presentResult"], json!(null));
        assert_eq!(line["notices"], json!([]));
        let keys: Vec<&str> = line.as_object().expect("object").keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["content", "isError", "structured", "presentCall", "presentResult", "id", "notices"]
        );
    }
}

#[test]
fn a_line_that_is_not_utf8_is_answered_and_the_batch_goes_on() {
    let sandbox = Sandbox::new();
    let mut input = Vec::new();
    input.extend_from_slice(
        b"{\"tool\":\"bash\",\"args\":{\"command\":\"echo one\",\"description\":\"d\"},\"id\":1}\n",
    );
    input.extend_from_slice(b"{\"tool\":\"bash\",\"id\":\"\xff\"}\r\n");
    input.extend_from_slice(
        b"{\"tool\":\"bash\",\"args\":{\"command\":\"echo three\",\"description\":\"d\"},\"id\":3}",
    );
    let out = output(sandbox.command(&["batch"]), &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stderr, "");
    let lines = out.json_lines();
    let texts: Vec<&str> = lines.iter().map(|l| l["content"][0]["text"].as_str().expect("text")).collect();
    assert_eq!(
        texts,
        ["one\n", "Error: invalid JSON: invalid utf-8 sequence of 1 bytes from index 21", "three\n"]
    );
    let errors: Vec<&serde_json::Value> = lines.iter().map(|l| &l["isError"]).collect();
    assert_eq!(errors, [&json!(false), &json!(true), &json!(false)]);
    let ids: Vec<&serde_json::Value> = lines.iter().map(|l| &l["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(null), &json!(3)]);
}

#[test]
fn a_session_keeps_the_cwd_it_was_created_with() {
    let sandbox = Sandbox::new();
    let a = sandbox.path().join("a");
    let b = sandbox.path().join("b");
    let input = format!(
        "{}\n{}\n{}\n{}\n",
        json!({"tool": "nope", "session": "s1", "cwd": a, "id": 1}),
        json!({"tool": "nope", "session": "s1", "id": 2}),
        json!({"tool": "nope", "session": "s1", "cwd": a, "id": 3}),
        json!({"tool": "nope", "session": "s1", "cwd": b, "id": 4}),
    );
    let out = sandbox.run(&["batch"], &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    let texts: Vec<&str> = lines.iter().map(|l| l["content"][0]["text"].as_str().expect("text")).collect();
    assert_eq!(texts[..3], ["Error: unknown tool \"nope\""; 3]);
    assert_eq!(
        texts[3],
        format!(
            "Error: session \"s1\" already has cwd {}; a session's cwd cannot change",
            json!(a.to_str().expect("utf-8"))
        )
    );
}

#[test]
fn several_sessions_in_one_batch_keep_their_cwds() {
    let sandbox = Sandbox::new();
    let a = sandbox.path().join("a");
    let b = sandbox.path().join("b");
    std::fs::create_dir(&a).expect("mkdir");
    std::fs::create_dir(&b).expect("mkdir");
    let who = json!({"command": "pwd -P; echo \"$DSH_SESSION_ID\"", "description": "Show where I am"});
    let input = [
        json!({"tool": "bash", "args": who, "session": "s1", "cwd": a, "id": "a1"}),
        json!({"tool": "bash", "args": who, "session": "s2", "cwd": b, "id": "b1"}),
        json!({"tool": "bash", "args": who, "session": "s1", "id": "a2"}),
        json!({"tool": "bash", "args": who, "id": "none"}),
        json!({"tool": "bash", "args": who, "session": "s2", "id": "b2"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let out = sandbox.run(&["batch"], &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    let a = a.canonicalize().expect("canonical");
    let b = b.canonicalize().expect("canonical");
    let here = sandbox.path().canonicalize().expect("canonical");
    let expected = [
        ("a1", format!("{}\ns1\n", a.display())),
        ("b1", format!("{}\ns2\n", b.display())),
        ("a2", format!("{}\ns1\n", a.display())),
        ("none", format!("{}\n\n", here.display())),
        ("b2", format!("{}\ns2\n", b.display())),
    ];
    assert_eq!(lines.len(), expected.len(), "{}", out.stdout);
    for (line, (id, text)) in lines.iter().zip(expected) {
        assert_eq!(line["id"], json!(id));
        assert_eq!(line["content"], json!([{"type": "text", "text": text}]), "{id}");
        assert_eq!(line["isError"], json!(false));
        assert_eq!(line["structured"]["exitCode"], json!(0));
        assert_eq!(line["presentResult"]["card"], json!("terminal"));
        assert_eq!(line["notices"], json!([]));
    }
}

fn lines_of(requests: &[serde_json::Value]) -> String {
    requests.iter().map(|r| format!("{r}\n")).collect()
}

#[test]
fn jobs_persist_across_lines_and_notices_reach_their_owner() {
    let sandbox = Sandbox::new();
    let a = sandbox.path().join("a");
    let b = sandbox.path().join("b");
    std::fs::create_dir(&a).expect("mkdir");
    std::fs::create_dir(&b).expect("mkdir");
    let label = "echo out; touch finished; exit 3";
    let input = lines_of(&[
        json!({"tool": "bash", "session": "s1", "cwd": a, "id": 1,
               "args": {"command": label, "description": "Background work", "run_in_background": true}}),
        // Wait (in the session's cwd) for the job's marker, then leave generous time to settle.
        json!({"tool": "bash", "session": "s1", "id": 2,
               "args": {"command": "while [ ! -e finished ]; do sleep 0.05; done; sleep 1", "description": "Wait"}}),
        json!({"tool": "job_list", "session": "s1", "id": 3}),
        json!({"tool": "job_output", "session": "s2", "cwd": b, "id": 4, "args": {"job_id": "bash-1"}}),
        json!({"tool": "job_list", "session": "s2", "id": 5}),
        json!({"tool": "job_output", "session": "s1", "id": 6, "args": {"job_id": "bash-1"}}),
    ]);
    let out = sandbox.run(&["batch"], &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines = out.json_lines();
    let texts: Vec<&str> = lines.iter().map(|l| l["content"][0]["text"].as_str().expect("text")).collect();
    assert_eq!(
        texts,
        [
            "started background job bash-1",
            "(no output)",
            &format!("bash-1 [bash] completed — {label}"),
            "Error: job bash-1 belongs to another session",
            "(no background jobs)",
            "out\n[status: completed, exit code: 3]",
        ]
    );
    assert_eq!(lines[0]["structured"], json!({"kind": "background", "jobId": "bash-1"}));
    let notices: Vec<&serde_json::Value> =
        lines.iter().flat_map(|l| l["notices"].as_array().expect("notices")).collect();
    assert_eq!(notices.len(), 1, "{}", out.stdout);
    let notice = notices[0];
    assert_eq!(
        notice["text"],
        json!(format!(
            "background job bash-1 (bash: {label}) finished [status: completed, exit code: 3]. Read its output with job_output."
        ))
    );
    assert_eq!(
        notice["source"],
        json!({"kind": "plugin", "plugin": "tool-jobs", "form": "notice",
               "summary": format!("bash {label} [status: completed, exit code: 3]")})
    );
    assert!(notice["delivery"] == "inject" || notice["delivery"] == "followup", "{notice}");
    for (i, line) in lines.iter().enumerate() {
        if [3, 4].contains(&i) {
            assert_eq!(line["notices"], json!([]), "s2 never sees s1's notice");
        }
    }
}

#[test]
fn end_of_input_tears_down_running_jobs() {
    let sandbox = Sandbox::new();
    // A short grace so the TERM-ignoring job is killed quickly.
    let config = sandbox.write("dsh.toml", "[bash-local]\ngraceMs = 200\n");
    let input = lines_of(&[
        json!({"tool": "bash", "session": "s1", "cwd": sandbox.path(), "id": 1, "args": {
            "command": "trap '' TERM; echo $$ > job.pid; while :; do sleep 0.1; done",
            "description": "Run until killed", "run_in_background": true}}),
        json!({"tool": "bash", "session": "s1", "id": 2, "args": {
            "command": "while [ ! -s job.pid ]; do sleep 0.05; done; cat job.pid", "description": "Wait for the job"}}),
    ]);
    let started = std::time::Instant::now();
    let out = sandbox.run(&["--config", config.to_str().expect("utf-8"), "batch"], &input);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "teardown hung");
    let lines = out.json_lines();
    let pid = lines[1]["content"][0]["text"].as_str().expect("text").trim().to_owned();
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "job {pid} outlived the batch");
}
