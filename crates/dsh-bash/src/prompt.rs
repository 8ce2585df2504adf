//! `dsh-bash prompt`: the assembled system prompt (sections in order, blank-line separated),
//! then nothing else.

use std::io::Write;

use anyhow::{Context as _, bail};
use dsh_core::SYSTEM_PROMPT;

use crate::cli::CompositionArgs;
use crate::composition::{Composition, Pending};

pub async fn run(composition: &CompositionArgs) -> anyhow::Result<u8> {
    let comp = Composition::start(composition, Pending::Refuse).await?;
    let text = comp.ctx().get(SYSTEM_PROMPT).map(|prompt| prompt.render());
    comp.dispose().await;
    let Some(text) = text else {
        bail!("the composition has no system prompt (add \"system-prompt\" to its plugins)");
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).context("writing stdout")?;
    Ok(0)
}
