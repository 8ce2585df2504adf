//! Outcome classification of a confined run: runner failure first, then denial.
//!
//! Both look only at the retained stderr tail and the exit code; a signal death (no exit code)
//! or a clean exit is never either.

use crate::confined::RunnerFailureRule;

/// The runner's fatal stderr line when a runner-failure rule matches, else `None`.
///
/// For each rule in order: skipped when its `allowed_exit_codes` exclude the exit code;
/// blank signatures are ignored; lines equal (whole line, case-insensitively) to an
/// informational line are skipped; the first line containing any fatal signature
/// (case-insensitively) is the match, returned as written. Lines split on `\r?\n`.
pub fn classify_runner_failure(
    exit_code: Option<i32>,
    stderr: &str,
    rules: &[RunnerFailureRule],
) -> Option<String> {
    let code = exit_code.filter(|c| *c != 0)?;
    let lines: Vec<&str> = stderr.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    for rule in rules {
        if rule.allowed_exit_codes.as_ref().is_some_and(|codes| !codes.contains(&code)) {
            continue;
        }
        let signatures: Vec<String> =
            rule.fatal_signatures.iter().filter(|s| !s.trim().is_empty()).map(|s| s.to_lowercase()).collect();
        if signatures.is_empty() {
            continue;
        }
        let informational: Vec<String> = rule.informational_lines.iter().map(|l| l.to_lowercase()).collect();
        for line in &lines {
            let lower = line.to_lowercase();
            if informational.contains(&lower) {
                continue;
            }
            if signatures.iter().any(|s| lower.contains(s.as_str())) {
                return Some((*line).to_owned());
            }
        }
    }
    None
}

/// Whether a non-zero exit's stderr shows a denied file effect: the lower-cased whole stderr
/// contains any lower-cased signature. Blank signatures never match.
pub fn matches_signature(exit_code: Option<i32>, stderr: &str, signatures: &[String]) -> bool {
    if exit_code.is_none_or(|c| c == 0) {
        return false;
    }
    let lower = stderr.to_lowercase();
    signatures.iter().filter(|s| !s.trim().is_empty()).any(|s| lower.contains(s.to_lowercase().as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTICE: &str = "landlock-run: partial enforcement (older Landlock ABI)";

    fn landlock_rules() -> Vec<RunnerFailureRule> {
        vec![RunnerFailureRule {
            allowed_exit_codes: Some(vec![125]),
            fatal_signatures: vec!["landlock-run: ".into()],
            informational_lines: vec![NOTICE.into()],
        }]
    }

    #[test]
    fn sb_16_landlock_notice_rules() {
        let rules = landlock_rules();
        for code in [1, 2, 125] {
            assert_eq!(classify_runner_failure(Some(code), &format!("{NOTICE}\n"), &rules), None);
        }
        let fatal = "landlock-run: cannot open rule path: /x: No such file or directory";
        assert_eq!(classify_runner_failure(Some(1), fatal, &rules), None);
        assert_eq!(classify_runner_failure(Some(2), fatal, &rules), None);
        assert_eq!(classify_runner_failure(Some(125), &NOTICE.to_uppercase(), &rules), None);

        let extended = format!("{NOTICE}: extra detail");
        assert_eq!(classify_runner_failure(Some(125), &extended, &rules), Some(extended.clone()));

        let exec_failed = "landlock-run: exec failed: No such file or directory";
        let stderr = format!("{NOTICE}\r\n{exec_failed}\n");
        assert_eq!(classify_runner_failure(Some(125), &stderr, &rules), Some(exec_failed.into()));

        let mut blanks = landlock_rules();
        blanks[0].fatal_signatures = vec!["".into(), "   ".into(), "landlock-run: ".into()];
        assert_eq!(classify_runner_failure(Some(125), "plain line", &blanks), None);
        assert_eq!(
            classify_runner_failure(Some(125), &format!("x\n{exec_failed}"), &blanks),
            Some(exec_failed.into())
        );
        blanks[0].fatal_signatures = vec!["  ".into()];
        assert_eq!(classify_runner_failure(Some(125), "anything", &blanks), None);
    }

    #[test]
    fn sb_16_partial_run_denial_and_fatal_outcomes() {
        let rules = landlock_rules();
        let denial_sigs = vec!["permission denied".to_owned()];
        let denied = format!("{NOTICE}\nbash: /w/x: Permission denied\n");
        assert_eq!(classify_runner_failure(Some(1), &denied, &rules), None);
        assert!(matches_signature(Some(1), &denied, &denial_sigs));

        let fatal = "landlock-run: landlock_restrict_self failed: Operation not permitted";
        let refused = format!("{NOTICE}\n{fatal}\n");
        assert_eq!(classify_runner_failure(Some(125), &refused, &rules), Some(fatal.into()));
    }

    #[test]
    fn runner_failure_needs_a_non_zero_exit_and_rules_are_tried_in_order() {
        let rules = vec![RunnerFailureRule::fatal(&["bwrap: "]), RunnerFailureRule::fatal(&["x: "])];
        assert_eq!(classify_runner_failure(None, "bwrap: boom", &rules), None);
        assert_eq!(classify_runner_failure(Some(0), "bwrap: boom", &rules), None);
        assert_eq!(
            classify_runner_failure(Some(1), "x: first\nBWRAP: Can't mkdir", &rules),
            Some("BWRAP: Can't mkdir".into())
        );
        assert_eq!(classify_runner_failure(Some(1), "nothing here", &rules), None);
    }

    #[test]
    fn denial_matches_whole_stderr_case_insensitively_on_non_zero_exit_only() {
        let sigs = vec!["read-only file system".to_owned(), "permission denied".to_owned()];
        assert!(matches_signature(Some(1), "bash: x: Read-only file system\n", &sigs));
        assert!(matches_signature(Some(2), "PERMISSION DENIED", &sigs));
        assert!(!matches_signature(Some(0), "Permission denied", &sigs));
        assert!(!matches_signature(None, "Permission denied", &sigs));
        assert!(!matches_signature(Some(1), "no such file", &sigs));
        assert!(!matches_signature(Some(1), "anything", &["".to_owned(), " ".to_owned()]));
        // Matching spans lines: the signature is looked up in the whole text.
        assert!(matches_signature(Some(126), "a\nread-only file system", &sigs));
    }
}
