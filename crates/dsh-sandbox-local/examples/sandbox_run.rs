//! Runs one command confined and classifies the outcome, or prints the provider report.
//!
//! `cargo run --example sandbox_run -- doctor`
//! `cargo run --example sandbox_run -- <landlock|bwrap> <read-only|workspace-write> <root> <command>`

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use dsh_sandbox::{
    SandboxExecutionPolicy, SandboxMode, SandboxProvider, classify_runner_failure, matches_signature,
};
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider, RunnerKind};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("doctor") {
        let provider =
            LocalSandboxProvider::new(LocalSandboxConfig::default()).expect("default config is valid");
        print!("{}", provider.describe());
        return;
    }
    let [runner, mode, root, command] = &args[..] else {
        eprintln!("usage: sandbox_run doctor | sandbox_run <runner> <mode> <root> <command>");
        std::process::exit(2);
    };
    let runner = match runner.as_str() {
        "landlock" => RunnerKind::Landlock,
        "bwrap" => RunnerKind::Bwrap,
        other => panic!("unknown runner {other}"),
    };
    let config = LocalSandboxConfig { runners: vec![runner], ..LocalSandboxConfig::default() };
    let provider = LocalSandboxProvider::new(config).expect("valid config");
    let policy =
        SandboxExecutionPolicy::new(SandboxMode::parse(mode).expect("a sandbox mode"), root.into(), None);
    let argv = ["bash".to_owned(), "-c".to_owned(), command.clone()];
    let confined = match provider.confine(&argv, &policy) {
        Ok(confined) => confined,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let mut cmd = Command::new(&confined.argv[0]);
    cmd.args(&confined.argv[1..]).current_dir(root).stdout(Stdio::inherit()).stderr(Stdio::piped());
    cmd.process_group(0);
    if let Some(confinement) = confined.child_confinement.clone() {
        // SAFETY: the confinement is async-signal-safe by contract.
        unsafe { cmd.pre_exec(move || confinement.apply_in_child()) };
    }
    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) => {
            eprintln!("spawn failed: {e}; confinement: {:?}", confined.confinement_failure());
            std::process::exit(1);
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprint!("{stderr}");
    let code = output.status.code();
    println!(
        "exit={code:?} enforcement={} runner_failure={:?} denied={}",
        confined.enforcement.as_str(),
        classify_runner_failure(code, &stderr, &confined.runner_failure_rules),
        matches_signature(code, &stderr, &confined.denial_signatures)
    );
}
