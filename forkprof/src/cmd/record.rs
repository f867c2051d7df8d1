//! `forkprof record -o FILE`: system-wide (or one process tree with -p, or one cgroup v2
//! subtree with --cgroup) until SIGINT, SIGTERM or --duration, into an SQLite recording.
use anyhow::{Context as _, Result};

use crate::cgroups::CgroupScope;
use crate::cli::RecordArgs;
use crate::collector::Pace;
use crate::privilege::InvokingUser;
use crate::session::{self, Options, StopSignals, TraceSession};

/// `pid` and every process below it now, from /proc (children lists of every thread).
fn tree_of(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                let children =
                    std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                out.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
        i += 1;
    }
    out
}

pub fn run(args: RecordArgs) -> Result<i32> {
    // Bad input is refused (exit 2) before anything is loaded.
    if let Some(why) = crate::cli::refuse_recording_path(&args.output, args.recording.force) {
        eprintln!("forkprof: {why}");
        return Ok(2);
    }
    if let Some(pid) = args.pid
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
    {
        eprintln!("forkprof: -p {pid}: no such process");
        return Ok(2);
    }
    let scope = match CgroupScope::from_arg(args.cgroup.as_deref()) {
        Ok(scope) => scope,
        Err(why) => {
            eprintln!("forkprof: {why}");
            return Ok(2);
        }
    };
    let runtime = session::runtime()?;
    let _in_runtime = runtime.enter();
    let user = InvokingUser::from_env()?;
    let mode = match (args.pid, &scope) {
        (Some(pid), _) => format!("pid {pid}"),
        (None, Some(scope)) => format!("cgroup {}", scope.path),
        (None, None) => "system".into(),
    };
    let mut session = TraceSession::start_in(
        Options {
            trace_all: args.pid.is_none(),
            precise_ld: args.recording.precise_ld,
            ia32_syscalls: args.recording.hooks.ia32_syscalls(),
            output: Some(args.output.clone()),
            keep_args: !args.recording.no_args,
            owner: user.clone(),
            meta: vec![("mode".into(), mode)],
            pace: Pace::PROMPT,
            keep_no_trace: true,
        },
        scope.as_ref(),
    )?;
    if let Some(pid) = args.pid {
        for p in tree_of(pid) {
            session
                .trace_pid(p)
                .with_context(|| format!("tracing pid {p}"))?;
        }
    }
    let mut signals = StopSignals::new()?;
    // Tracing has started: a script can wait for this line before it starts its workload.
    let what = match (args.pid, &scope) {
        (Some(pid), _) => format!("pid {pid} and its descendants"),
        (None, Some(scope)) => format!("the processes of cgroup {}", scope.path),
        (None, None) => "every process".into(),
    };
    let until = match args.duration {
        Some(d) => format!("for {}", humantime::format_duration(d)),
        None => "until Ctrl-C".into(),
    };
    eprintln!(
        "forkprof: recording {what} to {} {until}",
        args.output.display()
    );
    // A scope's cgroup that is removed stops the recording: nothing can run in it any more.
    let stop = async {
        match &scope {
            Some(scope) => tokio::select! {
                _ = signals.or_after(args.duration) => false,
                () = scope.removed() => true,
            },
            None => {
                signals.or_after(args.duration).await;
                false
            }
        }
    };
    let removed = runtime.block_on(session.run_until(stop))?;
    // From here on the same signals leave the processes/phases tables out (below): the
    // drain, which waits for the writer's backlog, may already take a while.
    let leave_out = signals.again()?;
    if let Some(scope) = scope.as_ref().filter(|_| removed) {
        eprintln!(
            "{}",
            scope.gone_message("the recording stops here, with everything recorded so far")
        );
    }
    let wall_ns = session.elapsed_ns();
    session.drain()?;
    let lost = session.trace.lost.total();
    // The processes/phases tables are derived from the file (`record` kept no trace): as
    // long as a `report` of it, seconds for a million processes. Ctrl-C leaves them out:
    // every record is in the file, and `report` reads it without them.
    eprintln!(
        "forkprof: tracing stopped; deriving the processes and phases tables of {} \
         (Ctrl-C leaves them out)",
        args.output.display()
    );
    let processes =
        session.finish_from_file(vec![("wall_ns".into(), wall_ns.to_string())], leave_out)?;
    eprintln!(
        "forkprof: recorded {processes} processes to {} ({lost} lost events)",
        args.output.display()
    );
    Ok(0)
}
