//! Answerers for hosts without a richer channel.

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;

use std::path::PathBuf;

use dsh_core::{ApprovalOutcome, Secret};

use crate::hub::{Answer, AnswerFn, ApprovalQuestion};
use crate::policy::Scope;
use crate::render::{escape_untrusted, subject_lines};

/// Always answers `outcome` (scripted use: `--approve allowed-once`); passes on secret-input
/// questions, having no secret to give.
pub fn fixed_answerer(outcome: ApprovalOutcome) -> AnswerFn {
    Arc::new(move |question: ApprovalQuestion| {
        Box::pin(async move {
            match question.secret_prompt {
                Some(_) => Answer::Pass,
                None => Answer::Outcome(outcome.as_str().to_owned()),
            }
        })
    })
}

/// Answers every secret-input question with the content of the file at `path`, read when
/// asked, without its final line ending (scripted use: `--askpass-answer-file`); passes on
/// consent questions. A file that cannot be read fails the answer (`unavailable`).
pub fn secret_file_answerer(path: PathBuf) -> AnswerFn {
    Arc::new(move |question: ApprovalQuestion| {
        let path = path.clone();
        Box::pin(async move {
            if question.secret_prompt.is_none() {
                return Answer::Pass;
            }
            match tokio::fs::read(&path).await {
                Ok(mut bytes) => {
                    strip_line_ending(&mut bytes);
                    let secret = Secret::new(bytes.as_slice());
                    bytes.fill(0);
                    Answer::Secret(secret)
                }
                Err(e) => Answer::Failed(format!("cannot read the askpass answer file: {e}")),
            }
        })
    })
}

/// Drops one final `\n` or `\r\n`.
fn strip_line_ending(bytes: &mut Vec<u8>) {
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
}

/// Asks on the controlling terminal (never stdin): `y` allows once, `s` allows for the
/// session and `a` always when the question offers those scopes, anything else rejects, end
/// of input cancels. A secret-input question is read without echo: the line typed is the
/// secret, end of input cancels. Without a terminal the answerer passes (→ `unavailable`).
pub fn tty_answerer() -> AnswerFn {
    Arc::new(|question: ApprovalQuestion| {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || ask_tty(&question))
                .await
                .unwrap_or_else(|e| Answer::Failed(e.to_string()))
        })
    })
}

fn ask_tty(question: &ApprovalQuestion) -> Answer {
    let Ok(tty) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty") else {
        return Answer::Pass;
    };
    let Ok(mut out) = tty.try_clone() else {
        return Answer::Pass;
    };
    if let Some(prompt) = &question.secret_prompt {
        return ask_tty_secret(question, prompt, tty, out);
    }
    let prompt = consent_prompt(question);
    if out.write_all(prompt.as_bytes()).and_then(|_| out.flush()).is_err() {
        return Answer::Pass;
    }
    let mut line = String::new();
    match BufReader::new(tty).read_line(&mut line) {
        Ok(0) => Answer::Outcome(ApprovalOutcome::Cancelled.as_str().to_owned()),
        Ok(_) if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") => {
            Answer::Outcome(ApprovalOutcome::AllowedOnce.as_str().to_owned())
        }
        Ok(_) => match scope_typed(line.trim()) {
            Some(scope) if question.offer.as_ref().is_some_and(|o| o.scopes.contains(&scope)) => {
                Answer::Granted(scope)
            }
            _ => Answer::Outcome(ApprovalOutcome::Rejected.as_str().to_owned()),
        },
        Err(e) => Answer::Failed(e.to_string()),
    }
}

/// The lasting scope a terminal answer names (`s`/`session`, `a`/`always`).
fn scope_typed(answer: &str) -> Option<Scope> {
    match answer.to_ascii_lowercase().as_str() {
        "s" | "session" => Some(Scope::Session),
        "a" | "always" => Some(Scope::Always),
        _ => None,
    }
}

/// The end of the terminal question: `Allow once? [y/N] `, followed by the lasting scopes
/// the question offers and what each grants.
fn allow_line(question: &ApprovalQuestion) -> String {
    let Some(offer) = question.offer.as_ref().filter(|o| !o.scopes.is_empty()) else {
        return "Allow once? [y/N] ".to_owned();
    };
    let choices: Vec<&str> = offer
        .scopes
        .iter()
        .filter_map(|scope| match scope {
            Scope::Session => Some("s = for this session"),
            Scope::Always => Some("a = always, saved in your policy file"),
            Scope::Once => None,
        })
        .collect();
    format!(
        "Allow once? [y/N] (or allow {}: {}) ",
        escape_untrusted(&offer.grant.describe()),
        choices.join(", ")
    )
}

/// The consent question as the terminal shows it. A command's question names the command,
/// its working directory and the mode or destination asked for ([`subject_lines`]); any other
/// names the tool and the reason. Every text from the model or a command is escaped.
fn consent_prompt(question: &ApprovalQuestion) -> String {
    let session = escape_untrusted(question.agent.id());
    match &question.subject {
        Some(subject) => {
            let lines = subject_lines(&question.tool_name, subject);
            format!(
                "\n[approval] session {session}: {}\n{}\n{}",
                lines.headline,
                lines.details.join("\n"),
                allow_line(question)
            )
        }
        None => format!(
            "\n[approval] session {session} asks to run tool \"{}\": {}\nAllow once? [y/N] ",
            escape_untrusted(&question.tool_name),
            escape_untrusted(question.reason.as_deref().unwrap_or("(no reason given)"))
        ),
    }
}

/// The secret-input question on the terminal: echo off, the command's prompt marked as its
/// own words, then one line read (echo restored afterwards, also on failure).
fn ask_tty_secret(
    question: &ApprovalQuestion,
    prompt: &str,
    tty: std::fs::File,
    mut out: std::fs::File,
) -> Answer {
    let text = format!(
        "\n[askpass] session {}: a command run by tool \"{}\" asks for a secret.\nIts prompt (the command's own words): {}\nType it for the command only (not echoed, never shown to the model; end of input refuses): ",
        question.agent.id(),
        question.tool_name,
        prompt.escape_debug()
    );
    // Echo goes off (and what was typed ahead is dropped) before the question shows: an
    // answer typed as soon as the question is on the screen is neither echoed nor discarded.
    let echo = match EchoOff::new(&tty) {
        Ok(echo) => echo,
        Err(e) => return Answer::Failed(format!("cannot turn the terminal's echo off: {e}")),
    };
    if out.write_all(text.as_bytes()).and_then(|_| out.flush()).is_err() {
        return Answer::Pass;
    }
    let mut line = Vec::new();
    let read = BufReader::new(&tty).read_until(b'\n', &mut line);
    drop(echo);
    let _ = out.write_all(b"\n");
    match read {
        Ok(0) => Answer::Outcome(ApprovalOutcome::Cancelled.as_str().to_owned()),
        Ok(_) => {
            strip_line_ending(&mut line);
            let secret = Secret::new(line.as_slice());
            line.fill(0);
            Answer::Secret(secret)
        }
        Err(e) => Answer::Failed(e.to_string()),
    }
}

/// The terminal's echo turned off while it lives; the earlier settings come back on drop.
struct EchoOff<'a> {
    tty: &'a std::fs::File,
    saved: rustix::termios::Termios,
}

impl<'a> EchoOff<'a> {
    fn new(tty: &'a std::fs::File) -> std::io::Result<Self> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let saved = tcgetattr(tty)?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO | LocalModes::ECHOE | LocalModes::ECHOK);
        quiet.local_modes.insert(LocalModes::ECHONL);
        tcsetattr(tty, OptionalActions::Flush, &quiet)?;
        Ok(Self { tty, saved })
    }
}

impl Drop for EchoOff<'_> {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(self.tty, rustix::termios::OptionalActions::Now, &self.saved);
    }
}
