//! Model-facing texts (description, parameter docs, prompt section), byte-exact; tests pin them.

/// The base paragraph of every description variant (ends with one space).
pub(crate) const BASE_DESCRIPTION: &str = "Execute a bash command (`bash -c`) and return its stdout/stderr. Each call runs in a fresh shell: no state (cwd, variables, functions) persists between calls — pass `workdir` instead of using `cd`. Non-zero exits are reported as `[exit code: N]`. Current harness environment facts are exposed through managed `$DSH_*` variables; inspect them when needed. Commands may run under a file sandbox; a blocked file operation is reported as `[sandbox: file access denied under <mode> mode]` — a policy denial, not a bug in the command; do not retry another way. Long output is truncated to its tail; the full output is saved to a file whose path is reported when available. ";

/// The sentence of [`BASE_DESCRIPTION`] that says nothing persists, replaced when state
/// persists.
pub(crate) const NO_STATE_SENTENCE: &str = "Each call runs in a fresh shell: no state (cwd, variables, functions) persists between calls — pass `workdir` instead of using `cd`.";

/// Replaces [`NO_STATE_SENTENCE`] under `persist = "cwd"`.
pub(crate) const PERSIST_CWD_SENTENCE: &str = "Each call runs in a fresh shell, but the working directory carries over: after `cd dir`, the session's next calls start in `dir` (`reset: true` starts a call from the session's workspace again); variables and functions do not persist.";

/// Replaces [`NO_STATE_SENTENCE`] under `persist = "env"`.
pub(crate) const PERSIST_ENV_SENTENCE: &str = "Each call runs in a fresh shell, but the working directory, exported variables and shell functions carry over to the session's next calls (`reset: true` starts a call from the session's starting state again); aliases, shell options, traps, non-exported variables and background processes do not.";

/// Follows [`ESCALATION_PARAGRAPH`] under `persist = "env"`.
pub(crate) const PERSIST_ENV_ESCALATION_SENTENCE: &str = " A call with `sandbox_permissions` starts in the carried directory only, without the carried variables and functions: put what it needs (such as `source venv/bin/activate &&`) in its command.";

/// The note every approval question of an escalated call shows under `persist = "env"`.
pub(crate) const ESCALATED_STATE_NOTE: &str = "Shell state: this call starts in the session's carried working directory only; the exported variables and functions earlier calls left do not apply to it.";

/// Appended when background execution is enabled.
pub(crate) const BACKGROUND_ENABLED: &str = "Set `run_in_background: true` for long-running commands: the call returns a job id immediately; read its output with `job_output` and stop it with `job_kill`.";

/// Appended when background execution is disabled by config.
pub(crate) const BACKGROUND_DISABLED: &str =
    "Background execution is not available; long-running commands must finish within the timeout.";

/// Appended (starting with one space) only when the executor sandboxes.
pub(crate) const ESCALATION_PARAGRAPH: &str = " Attempting a command the sandbox may deny is safe and expected: run it and read the marker rather than assuming the denial. When a command is denied and a wider mode would let it succeed, escalate immediately in the same turn — the one sanctioned exception to a denial: retry the exact same command once with `sandbox_permissions` (the narrowest wider mode that suffices) plus a one-sentence `justification`. Do not detour through chat to ask permission first — the approval prompt raised by that retry is how the user consents. If the session states approval prompts are disabled, there is no exception: a denial is final — do not set `sandbox_permissions`. Never escalate speculatively: ground the request in a real denial — normally the one this command just hit; escalating up front is fine only when this session already denied the same access. A rejected escalation is final for that command — stop and explain, never work around it — but it does not forbid attempting or escalating other commands later.";

pub(crate) const PARAM_COMMAND: &str = "The bash command to execute.";
pub(crate) const PARAM_DESCRIPTION: &str = "Clear, concise description of what this command does in active voice, 5-10 words (shown in the UI). Examples: \"ls\" → \"List files in current directory\"; \"git status\" → \"Show working tree status\"; \"npm install\" → \"Install package dependencies\".";
pub(crate) const PARAM_TIMEOUT_MS: &str = "Timeout in milliseconds. The executor applies its configured default and cap, and kills the command on expiry.";
pub(crate) const PARAM_WORKDIR: &str = "Working directory for this command. Defaults to the session workspace; a relative path is resolved against it.";
pub(crate) const PARAM_RUN_IN_BACKGROUND: &str = "Run in the background and return a job id immediately (collect with job_output, stop with job_kill). No timeout applies.";
pub(crate) const PARAM_TTY: &str = "With run_in_background: run the command on a terminal (40 rows, 120 columns) for programs that need one: REPLs, full-screen prompts, `isatty` checks. Its output is the terminal's text (escape sequences removed); type into it with job_input (Enter is a carriage return, Ctrl-C interrupts, Ctrl-D ends input).";
/// The error of `tty: true` without `run_in_background: true`.
pub(crate) const TTY_NEEDS_BACKGROUND: &str =
    "invalid tty: only a background command (run_in_background: true) runs on a terminal";
pub(crate) const PARAM_SANDBOX_PERMISSIONS: &str = "The wider sandbox mode this command needs. Only valid as a one-shot retry of a command the sandbox just denied; requires justification and user approval.";
pub(crate) const PARAM_RESET: &str = "Forget the state carried over from earlier calls of this session and run this command from the session's starting state.";
pub(crate) const PARAM_JUSTIFICATION: &str = "Required with sandbox_permissions: one sentence for the user explaining why this exact command needs the wider access.";

/// The `tool:bash` prompt section.
pub(crate) const SECTION_NAME: &str = "tool:bash";
pub(crate) const SECTION_ORDER: f64 = 105.0;
pub(crate) const SECTION_TEXT: &str =
    "Check the [exit code: N] marker on every bash result; investigate failures before moving on.";

/// The description for a configuration: base, one background sentence, and the escalation
/// paragraph when the executor sandboxes.
pub(crate) fn description(background: bool, escalation: bool, persist: crate::Persist) -> String {
    let mut out = match persist {
        crate::Persist::None => String::from(BASE_DESCRIPTION),
        crate::Persist::Cwd => BASE_DESCRIPTION.replacen(NO_STATE_SENTENCE, PERSIST_CWD_SENTENCE, 1),
        crate::Persist::Env => BASE_DESCRIPTION.replacen(NO_STATE_SENTENCE, PERSIST_ENV_SENTENCE, 1),
    };
    out.push_str(if background { BACKGROUND_ENABLED } else { BACKGROUND_DISABLED });
    if escalation {
        out.push_str(ESCALATION_PARAGRAPH);
        if persist == crate::Persist::Env {
            out.push_str(PERSIST_ENV_ESCALATION_SENTENCE);
        }
    }
    out
}
