//! forkprof: parse, dispatch, print errors. Everything else lives in the library.
use clap::Parser as _;
use forkprof::{cli, cmd};

fn main() {
    let cli = cli::Cli::parse();
    let verbose = cli.verbose;
    let result = match cli.command {
        cli::Command::Run(args) => cmd::run::run(args, verbose),
        cli::Command::Record(args) => cmd::record::run(args),
        cli::Command::Report(args) => cmd::report::run(args),
        cli::Command::Top(args) => cmd::top::run(args),
        cli::Command::Monitor(args) => cmd::monitor::run(args),
        cli::Command::Bench(args) => cmd::bench::run(args),
        cli::Command::Doctor => cmd::doctor::run(),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            if verbose {
                eprintln!("forkprof: error: {e:?}");
            } else {
                eprintln!("forkprof: error: {e:#}");
            }
            std::process::exit(1);
        }
    }
}
