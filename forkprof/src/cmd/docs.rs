//! `forkprof completions SHELL` and `forkprof man`: generated from the clap definition, so
//! they always list the flags the binary has.
use anyhow::Result;
use clap::CommandFactory as _;

use crate::cli::Cli;

pub fn completions(shell: clap_complete::Shell) -> Result<i32> {
    use std::io::Write as _;
    let mut cmd = Cli::command();
    // Into memory first: `generate` panics on a write error (stdout on a full disk), and
    // that is an error to report, not a bug.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "forkprof", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::Error::new(e).context("cannot write the completions"))?;
    Ok(0)
}

/// forkprof(1), or forkprof-SUBCOMMAND(1), the pages forkprof(1)'s SUBCOMMANDS section
/// names. An unknown subcommand is refused (exit 2) with the names there are.
pub fn man(subcommand: Option<&str>) -> Result<i32> {
    let cli = built();
    let page = match subcommand {
        None => cli,
        Some(name) => match cli.find_subcommand(name) {
            // clap names are &'static str (without its "string" feature); one page per run.
            Some(sub) => sub
                .clone()
                .name(&*Box::leak(format!("forkprof-{name}").into_boxed_str()))
                .bin_name(format!("forkprof {name}")),
            None => {
                eprintln!(
                    "forkprof: no subcommand {name:?}; there are {}",
                    subcommands().join(", ")
                );
                return Ok(2);
            }
        },
    };
    clap_mangen::Man::new(page).render(&mut std::io::stdout().lock())?;
    Ok(0)
}

/// The subcommands that have a man page of their own (as forkprof(1) lists them).
pub fn subcommands() -> Vec<String> {
    built()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .collect()
}

/// The command line as clap completes it before parsing: with its `help` subcommand, which
/// forkprof(1) lists too.
fn built() -> clap::Command {
    let mut cli = Cli::command();
    cli.build();
    cli
}
