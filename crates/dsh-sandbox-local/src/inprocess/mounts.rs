//! Which mounts the child makes writable again after turning `/` read-only.
//!
//! Each writable root is bind-mounted onto itself (recursively) so it is a mount of its own;
//! after `/` is made read-only recursively, the root's bind and every submount below it that
//! was writable on the host get their read-only flag cleared, one mount at a time. A mount the
//! host had read-only stays read-only, so the sandbox never grants more than the host does.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`: the mount point and whether it is read-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MountEntry {
    pub mount_point: PathBuf,
    pub read_only: bool,
}

/// Parses mountinfo text (fields: id, parent, dev, root, mount point, options, …).
pub(crate) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let mount_point = fields.nth(4)?;
            let options = fields.next()?;
            Some(MountEntry {
                mount_point: PathBuf::from(unescape(mount_point)),
                read_only: options.split(',').any(|o| o == "ro"),
            })
        })
        .collect()
}

/// Undoes the kernel's octal escaping of space, tab, newline and backslash.
fn unescape(field: &str) -> OsString {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits.iter().fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    OsString::from_vec(out)
}

/// The mount points to make writable for `roots`, given the host's mounts: each root whose
/// containing mount is writable, plus every writable mount strictly below a root. When one
/// mount point appears several times, the last (topmost) entry counts.
pub(crate) fn writable_mounts(roots: &[PathBuf], mounts: &[MountEntry]) -> Vec<PathBuf> {
    let topmost = |point: &Path| mounts.iter().rev().find(|m| m.mount_point == point);
    let mut out: Vec<PathBuf> = Vec::new();
    for root in roots {
        let containing = mounts
            .iter()
            .filter(|m| root.starts_with(&m.mount_point))
            .max_by_key(|m| m.mount_point.components().count())
            .and_then(|m| topmost(&m.mount_point));
        if containing.is_none_or(|m| !m.read_only) && !out.contains(root) {
            out.push(root.clone());
        }
        for m in mounts {
            let below = m.mount_point != *root && m.mount_point.starts_with(root);
            if below && topmost(&m.mount_point).is_some_and(|t| !t.read_only) && !out.contains(&m.mount_point)
            {
                out.push(m.mount_point.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:40 / /srv/ws/node\\040modules rw,relatime - tmpfs tmpfs rw
41 27 0:41 / /srv/ws/vendor ro,relatime - tmpfs tmpfs rw
42 27 0:42 / /srv/ro ro,relatime - tmpfs tmpfs rw
43 42 0:43 / /srv/ro/inner rw,relatime - tmpfs tmpfs rw
";

    #[test]
    fn parses_mount_points_and_read_only_flags() {
        let mounts = parse_mountinfo(MOUNTINFO);
        assert_eq!(mounts.len(), 6);
        assert_eq!(mounts[2].mount_point, PathBuf::from("/srv/ws/node modules"));
        assert!(!mounts[2].read_only);
        assert!(mounts[3].read_only);
        assert_eq!(unescape("a\\134b\\011c\\012"), OsString::from("a\\b\tc\n"));
        assert_eq!(unescape("trailing\\04"), OsString::from("trailing\\04"));
    }

    #[test]
    fn keeps_host_read_only_mounts_read_only() {
        let mounts = parse_mountinfo(MOUNTINFO);
        let roots = vec![PathBuf::from("/srv/ws"), PathBuf::from("/tmp"), PathBuf::from("/srv/ro/x")];
        assert_eq!(
            writable_mounts(&roots, &mounts),
            vec![PathBuf::from("/srv/ws"), PathBuf::from("/srv/ws/node modules"), PathBuf::from("/tmp")]
        );
        let inner = vec![PathBuf::from("/srv/ro")];
        assert_eq!(writable_mounts(&inner, &mounts), vec![PathBuf::from("/srv/ro/inner")]);
    }
}
