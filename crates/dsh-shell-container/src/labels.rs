//! Labels that tie a container to the harness that created it, and telling whether that
//! harness is gone.

/// The label naming the harness: `<boot id>/<pid>`.
pub const HARNESS_LABEL: &str = "dev.dsh-bash.harness";
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

/// Whether the harness a label names is gone: another boot, or no such process now. A
/// label that does not parse is left alone (another tool's container).
pub fn harness_is_gone(label: &str) -> bool {
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
}
