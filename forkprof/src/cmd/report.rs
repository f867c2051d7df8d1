//! `forkprof report FILE`: tables, JSON, CSV, flame graphs and timelines from a recording.
use std::io::Write as _;

use anyhow::Result;

use crate::cli::{Format, ReportCmdArgs};
use crate::elf::InterpCache;
use crate::model::phases::Phase;
use crate::model::report::GroupBy;
use crate::model::{
    Report,
    report::{Context, Filter},
};
use crate::output;
use crate::privilege::{InvokingUser, create_private_file};
use crate::recording::Recording;

/// Exit code for a file that is not a readable recording.
pub const EXIT_BAD_RECORDING: i32 = 2;

pub fn run(args: ReportCmdArgs) -> Result<i32> {
    if let (Some(from), Some(to)) = (args.from, args.to)
        && from >= to
    {
        eprintln!("forkprof: --from {from:?} is not before --to {to:?}: the range holds nothing");
        return Ok(2);
    }
    let recording = match Recording::open(&args.file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("forkprof: {e}");
            return Ok(EXIT_BAD_RECORDING);
        }
    };
    let trace = match recording.load(args.processes) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("forkprof: {e}");
            return Ok(EXIT_BAD_RECORDING);
        }
    };
    let num = |k: &str| recording.meta.get(k).and_then(|v| v.parse::<u64>().ok());
    let wall_ns = num("wall_ns")
        .or_else(|| Some(num("ended_ns")? - num("started_ns")?))
        .unwrap_or_else(|| trace.last_ns.saturating_sub(trace.first_ns.unwrap_or(0)));
    let sources = recording
        .meta
        .get("sources")
        .and_then(|s| serde_json::from_str::<std::collections::BTreeMap<String, String>>(s).ok())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| Some((Phase::from_name(&k)?, v)))
        .collect();
    let by = GroupBy::from(args.by);
    let groupings = vec![by];
    let loaders = InterpCache::default();
    let is_static = |p: &[u8]| loaders.is_static(p);
    let command = recording
        .meta
        .get("command")
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let filter = Filter {
        binary: args.filter.clone(),
        from_ns: args.from.map(|d| d.as_nanos() as u64),
        to_ns: args.to.map(|d| d.as_nanos() as u64),
    };
    let report = Report::build(
        &trace,
        &Context {
            command,
            exit: recording
                .meta
                .get("exit")
                .and_then(|e| serde_json::from_str(e).ok()),
            wall_ns,
            sources,
            is_static: &is_static,
            groupings,
            sort: args.sort.into(),
            filter: filter.clone(),
            processes: args.processes,
            folded: args.flamegraph.is_some() || args.folded.is_some(),
        },
    );
    let owner = InvokingUser::from_env()?;
    if let Some(path) = &args.folded {
        let mut f = create_private_file(path, owner.as_ref())?;
        output::flamegraph::write_folded(&report, &mut f)?;
    }
    if let Some(path) = &args.flamegraph {
        let mut f = create_private_file(path, owner.as_ref())?;
        output::flamegraph::write_svg(&report, &mut f)?;
    }
    if let Some(path) = &args.perfetto {
        let mut f = std::io::BufWriter::new(create_private_file(path, owner.as_ref())?);
        output::perfetto::write(&trace, &filter, &mut f)?;
        f.flush()?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.format {
        Format::Table => {
            output::table::write(&report, args.top, output::width::stdout(), &mut out)?
        }
        Format::Json => output::json::write(&report, &mut out)?,
        Format::Csv => output::csv::write(&report, by, &mut out)?,
    }
    out.flush()?;
    Ok(0)
}
