//! What a failed connection attempt means, in words a user can act on.
//!
//! `ssh` reports why it could not connect only as text. The cases a user must act on
//! differently are told apart here: an unknown host key (named by its fingerprint, never
//! added), a changed host key, refused authentication, anything else (ssh's own words).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use dsh_shell_remote::RemoteError;
use tokio::process::Command;

use crate::target::SshTarget;

/// What is needed to name a connection failure.
pub(crate) struct Attempt<'a> {
    /// The host.
    pub target: &'a SshTarget,
    /// The known-hosts file the host key was checked against (`None`: ssh's default).
    pub known_hosts: Option<&'a Path>,
    /// How long the fingerprint look-up may wait for the host.
    pub connect_timeout: Duration,
}

/// The error for a master connection `ssh` could not open, from ssh's own words.
pub(crate) async fn connect_refusal(attempt: &Attempt<'_>, ssh_said: &str) -> RemoteError {
    let target = attempt.target;
    let file = match attempt.known_hosts {
        Some(path) => path.display().to_string(),
        None => "the user's known_hosts".to_owned(),
    };
    if ssh_said.contains("REMOTE HOST IDENTIFICATION HAS CHANGED") {
        let offered = match fingerprint_in(ssh_said) {
            Some(fingerprint) => format!("the key it offers ({fingerprint}) does not match"),
            None => "the key it offers does not match".to_owned(),
        };
        return RemoteError::Unavailable(format!(
            "ssh {target}: refused: the host key changed: {offered} the one in {file}; \
             if the host was reinstalled, replace its line in that file"
        ));
    }
    if ssh_said.contains("Host key verification failed") || ssh_said.contains("host key is known for") {
        let key = match offered_key(attempt).await {
            Some(key) => key,
            None => {
                format!("{} key (its fingerprint could not be read)", key_type_in(ssh_said).unwrap_or("a"))
            }
        };
        return RemoteError::Unavailable(format!(
            "ssh {target}: refused: unknown host key {key}: not in {file} and not added; \
             if that fingerprint is the host's, add its key to that file"
        ));
    }
    let said = ssh_said.trim().lines().last().unwrap_or("no reason given").trim();
    if said.contains("Permission denied") {
        return RemoteError::Unavailable(format!(
            "ssh {target}: authentication failed ({said}); offer a key through the ssh agent \
             (SSH_AUTH_SOCK) or name one with --ssh-identity"
        ));
    }
    RemoteError::Unavailable(format!("ssh {target}: cannot connect: {said}"))
}

/// The host's key as `ssh` sees it (`ED25519 SHA256:…`), read from a verbose connection
/// attempt that stops at the same host-key check (same ssh config, same known-hosts file: it
/// adds nothing).
async fn offered_key(attempt: &Attempt<'_>) -> Option<String> {
    let mut ssh = Command::new("ssh");
    ssh.args(["-v", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
        .arg("-o")
        .arg(format!("ConnectTimeout={}", attempt.connect_timeout.as_secs().max(1)));
    if let Some(file) = attempt.known_hosts {
        let mut option = std::ffi::OsString::from("UserKnownHostsFile=");
        option.push(file);
        ssh.arg("-o").arg(option);
    }
    if let Some(port) = attempt.target.port {
        ssh.arg("-p").arg(port.to_string());
    }
    if let Some(user) = &attempt.target.user {
        ssh.arg("-l").arg(user);
    }
    ssh.arg("--")
        .arg(&attempt.target.host)
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let wait = attempt.connect_timeout + Duration::from_secs(5);
    let output = tokio::time::timeout(wait, ssh.output()).await.ok()?.ok()?;
    let text = String::from_utf8_lossy(&output.stderr);
    // `debug1: Server host key: ssh-ed25519 SHA256:…`
    let line = text.lines().find_map(|line| line.split_once("Server host key: ").map(|(_, key)| key))?;
    let (kind, fingerprint) = line.trim().split_once(' ')?;
    let kind = kind.trim_start_matches("ssh-").trim_start_matches("ecdsa-sha2-").to_ascii_uppercase();
    Some(format!("{kind} {}", fingerprint.trim()))
}

/// The first `SHA256:…` fingerprint in `text`.
fn fingerprint_in(text: &str) -> Option<&str> {
    let start = text.find("SHA256:")?;
    let rest = &text[start..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches('.'))
}

/// `ED25519` from `No ED25519 host key is known for …`.
fn key_type_in(text: &str) -> Option<&str> {
    let (before, _) = text.split_once(" host key is known for")?;
    before.rsplit(' ').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_fingerprints_and_key_types_in_ssh_text() {
        let changed = "The fingerprint for the ED25519 key sent by the remote host is\nSHA256:abc+/def.\nPlease contact";
        assert_eq!(fingerprint_in(changed), Some("SHA256:abc+/def"));
        assert_eq!(
            key_type_in(
                "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking."
            ),
            Some("ED25519")
        );
    }
}
