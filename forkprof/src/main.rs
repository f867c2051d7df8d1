//! forkprof: parse, dispatch, print errors. Everything else lives in the library.
use clap::Parser as _;
use forkprof::{cli, cmd};

/// Exit code after an internal error (a bug): sysexits' EX_SOFTWARE.
const EXIT_INTERNAL: i32 = 70;

fn main() {
    // A panic is a bug: say so in one line, then exit. The kernel unloads the programs when
    // the process's file descriptors close; the traced command is left running. The one
    // exception is printing to a closed pipe (`| head`): a normal end, so a quiet exit.
    std::panic::set_hook(Box::new(|info| {
        use std::io::Write as _;
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if msg.contains("Broken pipe") {
            std::process::exit(cmd::broken_pipe_exit_code());
        }
        let at = info
            .location()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        // Never panic here (eprintln! would, on a closed stderr): that would abort.
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "forkprof: internal error (a bug, please report it): {msg}{at}"
        );
        if std::env::var_os("RUST_BACKTRACE").is_some() {
            let _ = writeln!(err, "{}", std::backtrace::Backtrace::force_capture());
        }
        std::process::exit(EXIT_INTERNAL);
    }));
    let cli = cli::Cli::parse();
    let verbose = cli.verbose;
    let result = match cli.command {
        cli::Command::Run(args) => cmd::run::run(args, verbose),
        cli::Command::Record(args) => cmd::record::run(args),
        cli::Command::Report(args) => cmd::report::run(args),
        cli::Command::Diff(args) => cmd::diff::run(args),
        cli::Command::Export(args) => cmd::export::run(args),
        cli::Command::Top(args) => cmd::top::run(args),
        cli::Command::Monitor(args) => cmd::monitor::run(args),
        cli::Command::Bench(args) => cmd::bench::run(args),
        cli::Command::Doctor(args) => cmd::doctor::run(&args),
        cli::Command::Completions { shell } => cmd::docs::completions(shell),
        cli::Command::Man { subcommand } => cmd::docs::man(subcommand.as_deref()),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) if cmd::is_broken_pipe(&e) => std::process::exit(cmd::broken_pipe_exit_code()),
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
