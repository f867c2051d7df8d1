//! `forkprof completions SHELL` and `forkprof man`: generated from the clap definition, so
//! they always list the flags the binary has.
use anyhow::Result;
use clap::CommandFactory as _;

use crate::cli::Cli;

pub fn completions(shell: clap_complete::Shell) -> Result<i32> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "forkprof", &mut std::io::stdout().lock());
    Ok(0)
}

pub fn man() -> Result<i32> {
    clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout().lock())?;
    Ok(0)
}
