//! The exchange on a call's socket: the program writes the prompt and shuts its side down;
//! the harness answers [`GIVEN`] followed by the secret, or [`REFUSED`] followed by why (UTF-8
//! text, at most [`MAX_REASON`] bytes, possibly none), and closes.

/// The most prompt bytes the harness reads (the rest is dropped).
pub(crate) const MAX_PROMPT: usize = 4096;
/// The most answer bytes the program reads.
pub(crate) const MAX_ANSWER: usize = 64 * 1024;
/// The first byte of an answer that carries a secret.
pub(crate) const GIVEN: u8 = b'+';
/// The first byte of an answer without a secret.
pub(crate) const REFUSED: u8 = b'-';
/// The most bytes of why there is no secret.
pub(crate) const MAX_REASON: usize = 1024;
