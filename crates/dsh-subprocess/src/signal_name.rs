//! Standard names of terminating signals (`SIGTERM`, `SIGKILL`, …).

use nix::sys::signal::Signal;

/// The standard name of signal number `signo`.
///
/// Every named POSIX/Linux signal maps to its `SIG*` name; real-time signals map to
/// `SIGRTMIN+n` / `SIGRTMAX-n` (the first of the two forms whose offset is smaller), and
/// anything else to `SIG<number>`.
pub fn signal_name(signo: i32) -> String {
    if let Ok(signal) = Signal::try_from(signo) {
        return signal.as_str().to_owned();
    }
    #[cfg(target_os = "linux")]
    {
        let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        if (min..=max).contains(&signo) {
            let (from_min, to_max) = (signo - min, max - signo);
            return match (from_min, to_max) {
                (0, _) => "SIGRTMIN".to_owned(),
                (_, 0) => "SIGRTMAX".to_owned(),
                (up, down) if up <= down => format!("SIGRTMIN+{up}"),
                (_, down) => format!("SIGRTMAX-{down}"),
            };
        }
    }
    format!("SIG{signo}")
}

/// The number of the signal [`signal_name`] calls `name` (`SIGTERM` → 15, `SIGRTMIN+2`, `SIG77`).
pub fn signal_number(name: &str) -> Option<i32> {
    if let Ok(signal) = name.parse::<Signal>() {
        return Some(signal as i32);
    }
    #[cfg(target_os = "linux")]
    {
        let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        let realtime = match name {
            "SIGRTMIN" => Some(min),
            "SIGRTMAX" => Some(max),
            _ => name.strip_prefix("SIGRTMIN+").and_then(|n| n.parse::<i32>().ok()).map(|n| min + n).or_else(
                || name.strip_prefix("SIGRTMAX-").and_then(|n| n.parse::<i32>().ok()).map(|n| max - n),
            ),
        };
        if let Some(signo) = realtime {
            return (min..=max).contains(&signo).then_some(signo);
        }
    }
    name.strip_prefix("SIG").and_then(|n| n.parse::<i32>().ok()).filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_back_to_their_numbers() {
        for signo in 1..=64 {
            assert_eq!(signal_number(&signal_name(signo)), Some(signo), "{}", signal_name(signo));
        }
        assert_eq!(signal_number("SIGTERM"), Some(libc::SIGTERM));
        assert_eq!(signal_number("NOPE"), None);
        assert_eq!(signal_number("SIG0"), None);
    }

    #[test]
    fn standard_signals_have_their_names() {
        let table = [
            (libc::SIGHUP, "SIGHUP"),
            (libc::SIGINT, "SIGINT"),
            (libc::SIGQUIT, "SIGQUIT"),
            (libc::SIGILL, "SIGILL"),
            (libc::SIGTRAP, "SIGTRAP"),
            (libc::SIGABRT, "SIGABRT"),
            (libc::SIGBUS, "SIGBUS"),
            (libc::SIGFPE, "SIGFPE"),
            (libc::SIGKILL, "SIGKILL"),
            (libc::SIGUSR1, "SIGUSR1"),
            (libc::SIGSEGV, "SIGSEGV"),
            (libc::SIGUSR2, "SIGUSR2"),
            (libc::SIGPIPE, "SIGPIPE"),
            (libc::SIGALRM, "SIGALRM"),
            (libc::SIGTERM, "SIGTERM"),
            (libc::SIGCHLD, "SIGCHLD"),
            (libc::SIGCONT, "SIGCONT"),
            (libc::SIGSTOP, "SIGSTOP"),
            (libc::SIGTSTP, "SIGTSTP"),
            (libc::SIGTTIN, "SIGTTIN"),
            (libc::SIGTTOU, "SIGTTOU"),
            (libc::SIGURG, "SIGURG"),
            (libc::SIGXCPU, "SIGXCPU"),
            (libc::SIGXFSZ, "SIGXFSZ"),
            (libc::SIGVTALRM, "SIGVTALRM"),
            (libc::SIGPROF, "SIGPROF"),
            (libc::SIGWINCH, "SIGWINCH"),
            (libc::SIGIO, "SIGIO"),
            (libc::SIGPWR, "SIGPWR"),
            (libc::SIGSYS, "SIGSYS"),
        ];
        for (signo, name) in table {
            assert_eq!(signal_name(signo), name, "signal {signo}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn realtime_signals_are_named_relative_to_the_range() {
        assert_eq!(signal_name(libc::SIGRTMIN()), "SIGRTMIN");
        assert_eq!(signal_name(libc::SIGRTMIN() + 1), "SIGRTMIN+1");
        assert_eq!(signal_name(libc::SIGRTMAX()), "SIGRTMAX");
        assert_eq!(signal_name(libc::SIGRTMAX() - 1), "SIGRTMAX-1");
        assert_eq!(signal_name(200), "SIG200");
    }
}
