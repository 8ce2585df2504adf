//! Char-boundary helpers for byte windows cut out of a UTF-8 stream.
//!
//! A tail cut or an incremental read boundary may land inside a multibyte character. Rather
//! than decoding the halves as replacement characters, the head of a cut window skips the
//! continuation bytes of the character it cut into, and the end of an open stream holds an
//! incomplete trailing sequence back for the next read.

/// The longest UTF-8 encoding of one character.
const MAX_CHAR_LEN: usize = 4;

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// The encoded length a lead byte announces, or `None` for a byte that cannot start a
/// character (a continuation byte or an invalid byte).
fn announced_len(lead: u8) -> Option<usize> {
    match lead {
        0x00..=0x7F => Some(1),
        0xC2..=0xDF => Some(2),
        0xE0..=0xEF => Some(3),
        0xF0..=0xF4 => Some(4),
        _ => None,
    }
}

/// How many leading bytes of a window that starts mid-stream belong to a character whose
/// start was cut off (at most three continuation bytes).
pub(crate) fn cut_head_len(bytes: &[u8]) -> usize {
    bytes.iter().take(MAX_CHAR_LEN - 1).take_while(|b| is_continuation(**b)).count()
}

/// How many trailing bytes form the start of a character that is not complete yet.
///
/// Only a valid lead byte followed by fewer continuation bytes than it announces counts;
/// anything else is delivered as is (it will decode as replacement characters either way).
pub(crate) fn incomplete_tail_len(bytes: &[u8]) -> usize {
    let window = bytes.len().min(MAX_CHAR_LEN - 1);
    for back in 1..=window {
        let byte = bytes[bytes.len() - back];
        if is_continuation(byte) {
            continue;
        }
        return match announced_len(byte) {
            Some(len) if len > back => back,
            _ => 0,
        };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_skips_only_continuation_bytes() {
        let euro = "€".as_bytes(); // E2 82 AC
        assert_eq!(cut_head_len(&euro[1..]), 2);
        assert_eq!(cut_head_len(&euro[2..]), 1);
        assert_eq!(cut_head_len(euro), 0);
        assert_eq!(cut_head_len(b"abc"), 0);
        assert_eq!(cut_head_len(&[0x80, 0x80, 0x80, 0x80, b'a']), 3);
    }

    #[test]
    fn tail_holds_back_an_incomplete_character() {
        let s = "a€".as_bytes();
        assert_eq!(incomplete_tail_len(s), 0);
        assert_eq!(incomplete_tail_len(&s[..3]), 2);
        assert_eq!(incomplete_tail_len(&s[..2]), 1);
        let crab = "🦀".as_bytes();
        assert_eq!(incomplete_tail_len(&crab[..3]), 3);
        assert_eq!(incomplete_tail_len(crab), 0);
        assert_eq!(incomplete_tail_len(&[0xFF]), 0);
        assert_eq!(incomplete_tail_len(&[0x80, 0x80]), 0);
        assert_eq!(incomplete_tail_len(b""), 0);
    }
}
