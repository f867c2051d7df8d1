//! The command line (clap). Usage errors exit 2 with clap's message.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "forkprof",
    version,
    about = "Profile the cost of creating processes, per process, with eBPF",
    propagate_version = true
)]
pub struct Cli {
    /// Show full error chains (verifier logs included) instead of one line.
    #[arg(long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Trace a command and all its descendants, then report (needs root: run with sudo).
    Run(RunArgs),
    /// Show which kernel hooks load here, and why any are missing.
    Doctor,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Write the report as one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE (mode 0600) instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Rows shown in each table.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub top: usize,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub output: ReportArgs,
    /// Bracket the dynamic linker with uprobes (ld.so `_dl_debug_state`, libc
    /// `__libc_start_main`) instead of its syscalls: exact, but costlier per spawn.
    #[arg(long)]
    pub precise_ld: bool,
    /// The command to trace, and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<std::ffi::OsString>,
}
