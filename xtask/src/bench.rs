//! `cargo xtask bench`: see BENCHMARKS.md.
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub fn run(_args: &BenchArgs) -> Result<()> {
    anyhow::bail!("not implemented yet")
}
