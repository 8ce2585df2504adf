//! A session's working directory: the client's first `file://` root, else the configured
//! workspace root, else the server's cwd.

use std::path::PathBuf;

/// The local path of a `file://` URI (`file:///a%20b` → `/a b`; host `localhost` or empty).
/// Other schemes, remote hosts and relative paths give `None`.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://").or_else(|| {
        // Scheme names are case-insensitive.
        let (scheme, rest) = uri.split_once("://")?;
        scheme.eq_ignore_ascii_case("file").then_some(rest)
    })?;
    let path = match rest.find('/') {
        Some(0) => rest,
        Some(slash) if rest[..slash].eq_ignore_ascii_case("localhost") => &rest[slash..],
        _ => return None,
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let bytes = percent_decode(path.as_bytes())?;
    path_from_bytes(bytes)
}

#[cfg(unix)]
fn path_from_bytes(bytes: Vec<u8>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: Vec<u8>) -> Option<PathBuf> {
    String::from_utf8(bytes).ok().map(PathBuf::from)
}

fn percent_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%' {
            let hex = input.get(i + 1..i + 3)?;
            let text = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(text, 16).ok()?);
            i += 3;
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The first usable `file://` root among `uris`.
pub fn first_file_root<'a>(uris: impl IntoIterator<Item = &'a str>) -> Option<PathBuf> {
    uris.into_iter().find_map(file_uri_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_local_file_uris() {
        assert_eq!(file_uri_path("file:///home/u/proj"), Some(PathBuf::from("/home/u/proj")));
        assert_eq!(file_uri_path("file://localhost/a%20b/c"), Some(PathBuf::from("/a b/c")));
        assert_eq!(file_uri_path("FILE:///x"), Some(PathBuf::from("/x")));
        assert_eq!(file_uri_path("file:///x?query#frag"), Some(PathBuf::from("/x")));
    }

    #[test]
    fn refuses_other_schemes_hosts_and_bad_escapes() {
        assert_eq!(file_uri_path("https://example.com/x"), None);
        assert_eq!(file_uri_path("file://server/share"), None);
        assert_eq!(file_uri_path("file:///bad%zz"), None);
        assert_eq!(file_uri_path("file:relative"), None);
    }

    #[test]
    fn first_usable_root_wins() {
        let roots = ["https://x/y", "file:///first", "file:///second"];
        assert_eq!(first_file_root(roots), Some(PathBuf::from("/first")));
        assert_eq!(first_file_root(["mem://x"]), None);
    }
}
