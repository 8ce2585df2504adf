//! Answerers for hosts without a richer channel.

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;

use dsh_core::ApprovalOutcome;

use crate::hub::{Answer, AnswerFn, ApprovalQuestion};

/// Always answers `outcome` (scripted use: `--approve allowed-once`).
pub fn fixed_answerer(outcome: ApprovalOutcome) -> AnswerFn {
    Arc::new(move |_question| Box::pin(async move { Answer::Outcome(outcome.as_str().to_owned()) }))
}

/// Asks on the controlling terminal (never stdin): `y` allows once, anything else rejects,
/// end of input cancels. Without a terminal the answerer passes (→ `unavailable`).
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
    let reason = question.reason.as_deref().unwrap_or("(no reason given)");
    let prompt = format!(
        "\n[approval] session {} asks to run tool \"{}\": {}\nAllow once? [y/N] ",
        question.agent.id(),
        question.tool_name,
        reason
    );
    if out.write_all(prompt.as_bytes()).and_then(|_| out.flush()).is_err() {
        return Answer::Pass;
    }
    let mut line = String::new();
    match BufReader::new(tty).read_line(&mut line) {
        Ok(0) => Answer::Outcome(ApprovalOutcome::Cancelled.as_str().to_owned()),
        Ok(_) if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") => {
            Answer::Outcome(ApprovalOutcome::AllowedOnce.as_str().to_owned())
        }
        Ok(_) => Answer::Outcome(ApprovalOutcome::Rejected.as_str().to_owned()),
        Err(e) => Answer::Failed(e.to_string()),
    }
}
