//! `forkprof record -o FILE`: system-wide (or one process tree with -p) until SIGINT,
//! SIGTERM or --duration, into an SQLite recording.
use anyhow::{Context as _, Result, bail};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::RecordArgs;
use crate::elf::LoaderCache;
use crate::loader;
use crate::model::{Report, report::Context};
use crate::privilege::InvokingUser;
use crate::session::{Options, Session};

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
    loader::check_privileges()?;
    if let Some(pid) = args.pid
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
    {
        bail!("-p {pid}: no such process");
    }
    let user = InvokingUser::from_env()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _in_runtime = runtime.enter();
    let mode = match args.pid {
        Some(pid) => format!("pid {pid}"),
        None => "system".into(),
    };
    let mut session = Session::start(Options {
        trace_all: args.pid.is_none(),
        precise_ld: args.recording.precise_ld,
        output: Some(args.output.clone()),
        keep_args: !args.recording.no_args,
        owner: user.clone(),
        meta: vec![("mode".into(), mode)],
    })?;
    if let Some(pid) = args.pid {
        for p in tree_of(pid) {
            session
                .trace_pid(p)
                .with_context(|| format!("tracing pid {p}"))?;
        }
    }
    let duration = args.duration;
    let stop = async move {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = sleep => {}
        }
        anyhow::Ok(())
    };
    runtime.block_on(session.run_until(stop))??;
    let wall_ns = session.started.elapsed().as_nanos() as u64;
    session.drain()?;
    let loaders = LoaderCache::default();
    let is_static = |p: &[u8]| loaders.is_static(p);
    let report = Report::build(
        &session.trace,
        &Context {
            wall_ns,
            sources: session.sources(),
            ..Context::for_run(&is_static)
        },
    );
    let processes = report.summary.processes;
    let lost = report.summary.lost_events;
    session.finish(&report, vec![("wall_ns".into(), wall_ns.to_string())])?;
    eprintln!(
        "forkprof: recorded {processes} processes to {} ({lost} lost events)",
        args.output.display()
    );
    Ok(0)
}
