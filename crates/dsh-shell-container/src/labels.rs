//! Labels that tie a container to the harness that created it, and telling whether that
//! harness is gone.
//!
//! Several hosts may share one engine (`DOCKER_HOST`): a container counts as this host's only
//! when its [`HOST_LABEL`] names this host, and only then can its harness be looked up.

/// The label naming the harness: `<boot id>/<pid>`.
pub const HARNESS_LABEL: &str = "dev.dsh-bash.harness";
/// The label naming the host the harness ran on: `<machine id>/<host name>`.
pub const HOST_LABEL: &str = "dev.dsh-bash.host";
/// The label naming the session the container serves.
pub const SESSION_LABEL: &str = "dev.dsh-bash.session";

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// This harness as [`HARNESS_LABEL`] spells it.
pub fn harness_id() -> String {
    format!("{}/{}", boot_id(), std::process::id())
}

/// This host as [`HOST_LABEL`] spells it: its machine id and name; `None` when it has no
/// machine id (then no container can be proven this host's).
pub fn host_id() -> Option<String> {
    let machine = std::fs::read_to_string("/etc/machine-id").ok()?;
    let machine = machine.trim();
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    (!machine.is_empty()).then(|| format!("{machine}/{}", name.trim()))
}

/// Whether a container labelled `host` and `harness` is provably this host's and its harness
/// gone: the host label names this host, and the harness is of another boot or no such
/// process runs now. A container of another host sharing the engine, one without a host
/// label, or one whose labels do not parse is left alone.
pub fn ours_and_gone(host: Option<&str>, harness: &str) -> bool {
    host.is_some_and(|host| Some(host) == host_id().as_deref()) && harness_is_gone(harness)
}

/// Whether the harness a label names (on this host) is gone: another boot, or no such
/// process now. A label that does not parse is left alone (another tool's container).
fn harness_is_gone(label: &str) -> bool {
    let Some((boot, pid)) = label.rsplit_once('/') else { return false };
    let Ok(pid) = pid.parse::<u32>() else { return false };
    boot != boot_id()
        || (pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_harness_is_kept_and_a_dead_or_rebooted_one_is_gone() {
        assert!(!harness_is_gone(&harness_id()));
        assert!(harness_is_gone(&format!("{}/{}", boot_id(), u32::MAX - 1)));
        assert!(harness_is_gone(&format!("another-boot/{}", std::process::id())));
        assert!(!harness_is_gone("not ours"));
    }

    #[test]
    fn only_this_hosts_containers_can_be_gone() {
        let dead = format!("{}/{}", boot_id(), u32::MAX - 1);
        assert_eq!(ours_and_gone(host_id().as_deref(), &dead), host_id().is_some());
        assert!(!ours_and_gone(None, &dead));
        assert!(!ours_and_gone(Some("another-machine/another-host"), &dead));
        assert!(!ours_and_gone(host_id().as_deref(), &harness_id()));
    }
}
