//! The SSH host commands run on: `[user@]host[:port]`.

use std::fmt;
use std::str::FromStr;

/// The port `ssh` uses when none is given.
pub const DEFAULT_PORT: u16 = 22;

/// Where commands run: a host, and optionally the user to log in as and the port.
///
/// The host may be a name the user's `ssh_config` knows (an alias with its own `HostName`,
/// `ProxyJump`, …): it is handed to `ssh` as the destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshTarget {
    /// The user to log in as; `None`: whatever `ssh` picks (`ssh_config`'s `User`, else the
    /// local user name).
    pub user: Option<String>,
    /// The host name, alias or address (an IPv6 address without its brackets).
    pub host: String,
    /// The port; `None`: whatever `ssh` picks (`ssh_config`'s `Port`, else 22).
    pub port: Option<u16>,
}

/// Why a `[user@]host[:port]` was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("SSH host {given:?}: {why} (expected [user@]host[:port])")]
pub struct TargetError {
    given: String,
    why: &'static str,
}

impl FromStr for SshTarget {
    type Err = TargetError;

    fn from_str(given: &str) -> Result<Self, TargetError> {
        let refuse = |why| TargetError { given: given.to_owned(), why };
        let (user, rest) = match given.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, given),
        };
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let Some((host, after)) = bracketed.split_once(']') else {
                return Err(refuse("unclosed '['"));
            };
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return Err(refuse("text after ']' that is not :port")),
                },
            }
        } else if rest.matches(':').count() > 1 {
            // A bare IPv6 address has no port.
            (rest, None)
        } else {
            match rest.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (rest, None),
            }
        };
        let port = match port {
            None => None,
            Some(port) => match port.parse::<u16>() {
                Ok(0) | Err(_) => return Err(refuse("the port is not a number from 1 to 65535")),
                Ok(port) => Some(port),
            },
        };
        // `ssh` takes a destination or user starting with '-' for an option.
        let plain = |text: &str| {
            !text.is_empty()
                && !text.starts_with('-')
                && !text
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || "@[]/\\'\"`$;&|<>".contains(c))
        };
        if !plain(host) {
            return Err(refuse("not a host name or address"));
        }
        if let Some(user) = user
            && !plain(user)
        {
            return Err(refuse("not a user name"));
        }
        Ok(SshTarget { user: user.map(str::to_owned), host: host.to_owned(), port })
    }
}

impl fmt::Display for SshTarget {
    /// `user@host:port`, the port shown even when it is the default; an IPv6 address in
    /// brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        let port = self.port.unwrap_or(DEFAULT_PORT);
        match self.host.contains(':') {
            true => write!(f, "[{}]:{port}", self.host),
            false => write!(f, "{}:{port}", self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SshTarget, TargetError> {
        text.parse()
    }

    #[test]
    fn parses_user_host_and_port() {
        let target = parse("deploy@build.example:2222").expect("parsed");
        assert_eq!(
            target,
            SshTarget { user: Some("deploy".into()), host: "build.example".into(), port: Some(2222) }
        );
        assert_eq!(target.to_string(), "deploy@build.example:2222");
        assert_eq!(parse("box").expect("parsed").to_string(), "box:22");
        assert_eq!(parse("root@[::1]:2200").expect("parsed").to_string(), "root@[::1]:2200");
        assert_eq!(parse("::1").expect("parsed").host, "::1");
    }

    #[test]
    fn refuses_what_ssh_would_take_for_an_option_or_a_shell_word() {
        for given in [
            "-oProxyCommand=x",
            "me@-oProxyCommand=x",
            "-l@host",
            "",
            "host:0",
            "host:70000",
            "a b",
            "h;id",
            "[::1",
        ] {
            assert!(parse(given).is_err(), "{given:?} was accepted");
        }
        assert_eq!(
            parse("host:x").expect_err("refused").to_string(),
            "SSH host \"host:x\": the port is not a number from 1 to 65535 (expected [user@]host[:port])"
        );
    }
}
