//! `forkprof run -- CMD`: load, start CMD as the invoking user with its pid seeded into the
//! kernel's traced set, collect until CMD exits, report, and exit with CMD's status.
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{ReportArgs, RunArgs};
use crate::collector::Pace;
use crate::loader::Ia32Syscalls;
use crate::model::{Report, report::escape, trace::ExitStatus};
use crate::output;
use crate::privilege::{InvokingUser, create_private_file};
use crate::session::{self, Options, TraceSession};

/// Exit codes of `run` besides the command's own.
pub const EXIT_NOT_FOUND: i32 = 127;
pub const EXIT_NOT_EXECUTABLE: i32 = 126;

/// Where `program` resolves, searching PATH like a shell when it has no '/'.
fn resolve(program: &OsStr) -> Result<PathBuf, i32> {
    let executable = |p: &Path| -> Option<bool> {
        let meta = std::fs::metadata(p).ok()?;
        use std::os::unix::fs::PermissionsExt as _;
        Some(meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    // As a shell: an empty name is no command (it would otherwise join PATH's directories).
    if program.is_empty() {
        return Err(EXIT_NOT_FOUND);
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return match executable(&p) {
            Some(true) => Ok(p),
            Some(false) => Err(EXIT_NOT_EXECUTABLE),
            None => Err(EXIT_NOT_FOUND),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let mut found_not_executable = false;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        match executable(&candidate) {
            Some(true) => return Ok(candidate),
            Some(false) => found_not_executable = true,
            None => {}
        }
    }
    Err(if found_not_executable {
        EXIT_NOT_EXECUTABLE
    } else {
        EXIT_NOT_FOUND
    })
}

fn command_line(args: &[OsString]) -> Vec<String> {
    args.iter().map(|a| escape(a.as_bytes())).collect()
}

pub fn run(args: RunArgs, _verbose: bool) -> Result<i32> {
    if let Some(why) = args
        .output
        .as_deref()
        .and_then(|p| crate::cli::refuse_recording_path(p, args.recording.force))
    {
        eprintln!("forkprof: {why}");
        return Ok(2);
    }
    let recording: Vec<(&str, &std::path::Path)> = args
        .output
        .as_deref()
        .map(|p| ("-o", p))
        .into_iter()
        .collect();
    let report: Vec<(&str, &std::path::Path)> = args
        .output_format
        .report
        .as_deref()
        .map(|p| ("--report", p))
        .into_iter()
        .collect();
    if let Some(why) = crate::cli::refuse_outputs(&recording, &report) {
        eprintln!("forkprof: {why}");
        return Ok(2);
    }
    let runtime = session::runtime()?;
    let _in_runtime = runtime.enter();
    let program = &args.command[0];
    // Resolved here, before tracing: the traced child execs this path once, and forkprof's
    // own PATH search is not charged to the command as failed execs.
    let resolved = match resolve(program) {
        Ok(path) => path,
        Err(code) => {
            let why = if code == EXIT_NOT_FOUND {
                "command not found"
            } else {
                "Permission denied"
            };
            eprintln!("forkprof: {}: {why}", escape(program.as_bytes()));
            return Ok(code);
        }
    };
    let user = InvokingUser::from_env()?;
    let command = command_line(&args.command);
    let mut session = TraceSession::start(Options {
        trace_all: false,
        precise_ld: args.recording.precise_ld,
        // A 32-bit command is followed by sys_enter and sys_exit from the start: on demand,
        // they would attach only once its exec is seen, after its first spawns perhaps.
        ia32_syscalls: match args.recording.hooks.ia32_syscalls_given() {
            Some(given) => given,
            None if crate::elf::is_32_bit(&resolved) => Ia32Syscalls::Always,
            None => Ia32Syscalls::default(),
        },
        output: args.output.clone(),
        keep_args: !args.recording.no_args,
        owner: user.clone(),
        // Nothing reads the records before the command ends, unless they are recorded or
        // `--precise-ld` attaches its uprobes as execs are read.
        pace: if args.output.is_none() && !args.recording.precise_ld {
            Pace::LAZY
        } else {
            Pace::PROMPT
        },
        // Its report is built from the trace.
        keep_no_trace: false,
        meta: vec![
            ("mode".into(), "run".into()),
            (
                "command".into(),
                // --no-args keeps secrets out of the file: the program name only.
                serde_json::to_string(if args.recording.no_args {
                    &command[..1]
                } else {
                    &command[..]
                })?,
            ),
        ],
    })?;
    let seeds = session.seeds()?;

    let mut cmd = std::process::Command::new(&resolved);
    cmd.arg0(program).args(&args.command[1..]);
    if let Some(u) = &user {
        if let Some(home) = &u.home {
            cmd.env("HOME", home);
        }
        if let Some(name) = &u.name {
            cmd.env("USER", name).env("LOGNAME", name);
        }
    }
    let child_user = user.clone();
    // SAFETY: the closure runs between fork and exec and only makes raw syscalls.
    unsafe {
        cmd.pre_exec(move || {
            // Still root: the child adds itself, so its exec is traced and no pid can race.
            seeds.seed(std::process::id())?;
            if let Some(u) = &child_user {
                u.become_user()?;
            }
            Ok(())
        });
    }
    // Catch the signals to forward before the command exists: one sent as soon as it starts
    // must reach it, not kill forkprof. Each stream keeps what arrives until it is read.
    let mut forwarded = Vec::new();
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::quit(),
    ] {
        forwarded.push((kind, signal(kind)?));
    }
    let started = Instant::now();
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_NOT_EXECUTABLE,
            };
            // The file was found above: ENOENT now is what it needs to run.
            if code == EXIT_NOT_FOUND && resolved.exists() {
                eprintln!(
                    "forkprof: {}: cannot execute: its interpreter (#! line or ELF loader) was not found",
                    escape(program.as_bytes())
                );
            } else {
                eprintln!("forkprof: {}: {e}", escape(program.as_bytes()));
            }
            return Ok(code);
        }
    };
    let pid = child.id();
    session.trace.set_root(pid);
    for (kind, mut stream) in forwarded {
        runtime.spawn(async move {
            while stream.recv().await.is_some() {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid as i32, kind.as_raw_value()) };
            }
        });
    }
    let waiter = tokio::task::spawn_blocking(move || wait_for(pid));
    let status = runtime
        .block_on(session.run_until(waiter))?
        .context("waiting for the command")??;
    let wall_ns = started.elapsed().as_nanos() as u64;
    session.drain()?;
    // The table shows `--top` rows of each grouping: the others are not built.
    let group_rows = (!args.output_format.json).then_some(args.output_format.top);
    let report = session.report(command, Some(status), wall_ns, group_rows);
    // A report nobody reads any more (`2>&1 | head -1`) is no failure: the command's status
    // stands.
    super::exit_code_on_broken_pipe(status.shell_code());
    // The report first: a recording that failed (disk full) must not take it along. Nor
    // may a report that failed (`--report` on a full disk) take the recording's end along:
    // its wall time, exit status and last loss counts are written either way.
    let reported = match write_report(&report, &args.output_format, user.as_ref()) {
        Err(e) if !super::is_broken_pipe(&e) => Err(e),
        _ => Ok(()),
    };
    let finished = session.finish(
        &report,
        vec![
            ("root_pid".into(), pid.to_string()),
            ("exit".into(), serde_json::to_string(&status)?),
            // The report's wall time, so that `report FILE` gives the same rates and shares.
            ("wall_ns".into(), wall_ns.to_string()),
        ],
    );
    if let Err(e) = reported {
        if let Err(f) = &finished {
            eprintln!("forkprof: error: {f:#}");
        }
        return Err(e);
    }
    finished?;
    Ok(status.shell_code())
}

pub fn write_report(
    report: &Report,
    args: &ReportArgs,
    owner: Option<&InvokingUser>,
) -> Result<()> {
    // Buffered: the writers below make a write per value or line, and neither a file nor
    // stderr buffers (a JSON report of 2000 processes took 676,243 write syscalls).
    let mut out: Box<dyn Write> = match &args.report {
        Some(path) => Box::new(std::io::BufWriter::new(create_private_file(path, owner)?)),
        None => Box::new(std::io::BufWriter::new(std::io::stderr().lock())),
    };
    let written = (|| {
        if args.json {
            output::json::write(report, &mut out)?;
        } else {
            // Fit the terminal only when the report goes to it (stderr), not to a file.
            let width = match args.report {
                None => output::width::stderr(),
                Some(_) => None,
            };
            output::table::write(report, args.top, width, &mut out)?;
        }
        out.flush()?;
        anyhow::Ok(())
    })();
    written.with_context(|| match &args.report {
        Some(path) => format!("cannot write the report to {}", path.display()),
        None => "cannot write the report to stderr".to_string(),
    })
}

fn wait_for(pid: u32) -> Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if rc == pid as i32 {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err).context("waitpid");
        }
    }
    Ok(ExitStatus::from_wait_code(status as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_a_shell() {
        assert!(resolve(OsStr::new("sh")).is_ok());
        assert_eq!(
            resolve(OsStr::new("no-such-forkprof-cmd")),
            Err(EXIT_NOT_FOUND)
        );
        assert_eq!(resolve(OsStr::new("/nonexistent/x")), Err(EXIT_NOT_FOUND));
        assert_eq!(resolve(OsStr::new("/etc/passwd")), Err(EXIT_NOT_EXECUTABLE));
        assert_eq!(resolve(OsStr::new("")), Err(EXIT_NOT_FOUND));
    }
}
