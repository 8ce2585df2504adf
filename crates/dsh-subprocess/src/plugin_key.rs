//! The service key a composition (`dsh-core`) reaches the subprocess service by. Behind the
//! `plugin` feature, so the mechanics build without `dsh-core`.

use std::sync::Arc;

use crate::SubprocessService;

/// The service key name the subprocess service registers under.
pub const SUBPROCESS_SERVICE: &str = "subprocess";

/// The typed service key of the subprocess service.
pub const SUBPROCESS: dsh_core::ServiceKey<Arc<SubprocessService>> =
    dsh_core::ServiceKey::new(SUBPROCESS_SERVICE);
