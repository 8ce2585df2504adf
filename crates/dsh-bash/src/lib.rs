//! Library side of the `dsh-bash` host: the pieces of its input handling that stand on their
//! own, so they can be property-tested and fuzzed without starting a composition.

pub mod batch_line;
