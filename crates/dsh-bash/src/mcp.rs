//! `dsh-bash mcp`: the composition's tools served over the Model Context Protocol on stdio.

use anyhow::bail;

use crate::cli::CompositionArgs;

pub async fn run(_composition: &CompositionArgs) -> anyhow::Result<u8> {
    bail!("the MCP server (dsh-mcp) is not part of this build")
}
