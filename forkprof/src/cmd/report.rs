//! `forkprof report FILE`: tables, JSON, CSV, flame graphs and timelines from a recording.
use std::io::Write as _;

use anyhow::{Context as _, Result};

use crate::cli::{Format, ReportCmdArgs};
use crate::cmd::{bad_recording_or, open_recording};
use crate::elf::InterpCache;
use crate::model::phases::Phase;
use crate::model::processes::ProcessView;
use crate::model::report::{Added, Context, Filter, GroupBy};
use crate::model::trace::Binaries;
use crate::model::{Process, Trace};
use crate::output;
use crate::output::perfetto::Timeline;
use crate::privilege::{InvokingUser, create_private_file};

/// The flags that select processes, as given (`--filter "cc1" --from 30s`), if any.
fn selection(args: &ReportCmdArgs) -> Option<String> {
    let mut flags = Vec::new();
    if let Some(f) = &args.filter {
        flags.push(format!("--filter {f:?}"));
    }
    if let Some(d) = args.from {
        flags.push(format!("--from {}", humantime::format_duration(d)));
    }
    if let Some(d) = args.to {
        flags.push(format!("--to {}", humantime::format_duration(d)));
    }
    (!flags.is_empty()).then(|| flags.join(" "))
}

pub fn run(args: ReportCmdArgs) -> Result<i32> {
    if let (Some(from), Some(to)) = (args.from, args.to)
        && from >= to
    {
        eprintln!("forkprof: --from {from:?} is not before --to {to:?}: the range holds nothing");
        return Ok(2);
    }
    // Rows per process exist in JSON and CSV only: asked for in a table, they would
    // silently not be.
    if args.processes && matches!(args.format, Format::Table) {
        eprintln!(
            "forkprof: --processes gives one row per process in JSON or CSV; add --format json or --format csv"
        );
        return Ok(2);
    }
    // JSON adds the processes to the report; CSV has one row per process instead.
    let json_processes = args.processes && matches!(args.format, Format::Json);
    let csv_processes = args.processes && matches!(args.format, Format::Csv);
    let outputs: Vec<(&str, &std::path::Path)> = [
        ("--flamegraph", &args.flamegraph),
        ("--folded", &args.folded),
        ("--perfetto", &args.perfetto),
    ]
    .into_iter()
    .filter_map(|(flag, p)| Some((flag, p.as_deref()?)))
    .collect();
    if let Some(why) = crate::cli::refuse_outputs(&[("FILE", &args.file)], &outputs) {
        eprintln!("forkprof: {why}");
        return Ok(2);
    }
    let (recording, mut start) = match open_recording(&args.file, json_processes) {
        Ok(opened) => opened,
        Err(code) => return Ok(code),
    };
    let num = |k: &str| recording.meta.get(k).and_then(|v| v.parse::<u64>().ok());
    // An end before the start (a meta that was edited or damaged) gives no wall time, and
    // the records' span stands in, as for a recording without one.
    let meta_wall_ns = num("wall_ns").or_else(|| num("ended_ns")?.checked_sub(num("started_ns")?));
    // The first record's time is where --from/--to and the timeline start, and the wall
    // time of a recording that did not keep it is the records' span: both from a scan of
    // the tables, made only when needed.
    let span = if args.from.is_some()
        || args.to.is_some()
        || args.perfetto.is_some()
        || meta_wall_ns.is_none()
    {
        match recording.span() {
            Ok(s) => s,
            Err(e) => return bad_recording_or(e.into()),
        }
    } else {
        None
    };
    if let Some((first, _)) = span {
        start.first_ns = Some(first);
    }
    let wall_ns = meta_wall_ns
        .or_else(|| span.map(|(a, b)| b.saturating_sub(a)))
        .unwrap_or(0);
    let sources = recording
        .meta
        .get("sources")
        .and_then(|s| serde_json::from_str::<std::collections::BTreeMap<String, String>>(s).ok())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| Some((Phase::from_name(&k)?, v)))
        .collect();
    let by = GroupBy::from(args.by);
    let loaders = InterpCache::default();
    let is_static = |p: &[u8]| loaders.is_static(p);
    let command = recording
        .meta
        .get("command")
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let filter = Filter {
        binary: args.filter.clone(),
        // Past u64's 584 years of nanoseconds, a bound is past every record.
        from_ns: args
            .from
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        to_ns: args
            .to
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
    };
    let ctx = Context {
        command,
        exit: recording
            .meta
            .get("exit")
            .and_then(|e| serde_json::from_str(e).ok()),
        wall_ns,
        sources,
        is_static: &is_static,
        groupings: vec![by],
        sort: args.sort.into(),
        // The table shows `--top` rows of its grouping, and the per-process CSV none: the
        // others are not built.
        group_rows: match args.format {
            Format::Table => Some(args.top),
            Format::Csv if csv_processes => Some(0),
            Format::Json | Format::Csv => None,
        },
        filter,
        processes: json_processes,
        folded: args.flamegraph.is_some() || args.folded.is_some(),
        flame_root: matches!(by, GroupBy::Cgroup | GroupBy::Unit).then_some(by),
    };
    let owner = InvokingUser::from_env()?;
    // Per-process outputs are written as the processes complete.
    let mut timeline_file = match &args.perfetto {
        Some(path) => {
            let file = create_private_file(path, owner.as_ref())?;
            super::remove_on_signal(path)?;
            Some(std::io::BufWriter::new(file))
        }
        None => None,
    };
    let mut timeline = match timeline_file.as_mut() {
        Some(f) => {
            let mut t = Timeline::begin(f, start.first_ns.unwrap_or(0))?;
            t.children_first = true;
            Some(t)
        }
        None => None,
    };
    let mut process_csv = match csv_processes {
        true => Some(output::csv::ProcessWriter::new(
            std::io::BufWriter::new(std::io::stdout().lock()),
            recording.meta.get("host").cloned(),
        )?),
        false => None,
    };
    let mut rows = match json_processes {
        true => Some(output::json::RowSpool::new()?),
        false => None,
    };
    let mut each = |trace: &Trace, p: &Process, bins: &Binaries, added: Added| {
        if let (Some(t), Some(path)) = (timeline.as_mut(), &args.perfetto) {
            t.process(p, &bins.last, trace.last_ns)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let Some(w) = process_csv.as_mut() {
            w.push(&ProcessView::with_phases(
                trace,
                p,
                bins.clone(),
                added.phases,
            ))
            .context("cannot write the report to stdout")?;
        }
        if let (Some(spool), Some(row)) = (rows.as_mut(), added.row) {
            spool
                .push(&row)
                .context("cannot keep the per-process rows in a temporary file")?;
        }
        Ok(())
    };
    let mut report = match recording.report(&ctx, start, json_processes, &mut each) {
        Ok(r) => r,
        Err(e) => return bad_recording_or(e),
    };
    if let (Some(t), Some(path)) = (timeline, &args.perfetto) {
        t.end()
            .and_then(|()| Ok(timeline_file.as_mut().map(|f| f.flush()).transpose()?))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if report.summary.processes == 0
        && let Some(selection) = selection(&args)
    {
        eprintln!(
            "forkprof: no process in {} matches {selection}",
            args.file.display()
        );
    }
    // `record` and `run -o` write `ended_ns` when they finish.
    report.unfinished = !recording.meta.contains_key("ended_ns");
    if let Some(path) = &args.folded {
        let mut f = std::io::BufWriter::new(create_private_file(path, owner.as_ref())?);
        output::flamegraph::write_folded(&report, &mut f)
            .and_then(|()| Ok(f.flush()?))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.flamegraph {
        let mut f = std::io::BufWriter::new(create_private_file(path, owner.as_ref())?);
        output::flamegraph::write_svg(&report, &mut f)
            .and_then(|()| Ok(f.flush()?))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(w) = process_csv {
        w.finish()
            .and_then(|mut out| Ok(out.flush()?))
            .context("cannot write the report to stdout")?;
        return Ok(0);
    }
    // Buffered: stdout alone flushes at every line, a syscall per line of a JSON report.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = (|| {
        match args.format {
            Format::Table => {
                output::table::write(&report, args.top, output::width::stdout(), &mut out)?
            }
            Format::Json => output::json::write_with_rows(&report, rows, &mut out)?,
            Format::Csv => output::csv::write(&report, by, &mut out)?,
        }
        out.flush()?;
        anyhow::Ok(())
    })();
    written.context("cannot write the report to stdout")?;
    Ok(0)
}
