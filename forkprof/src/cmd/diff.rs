//! `forkprof diff BEFORE AFTER`: did spawning get cheaper between two recordings, and is it real?
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::cli::{DiffArgs, Format};
use crate::cmd::EXIT_BAD_RECORDING;
use crate::elf::InterpCache;
use crate::model::diff::{self, Side, SideBuilder, compare};
use crate::model::report::{Context, GroupBy};
use crate::output;
use crate::privilege::{InvokingUser, create_private_file};
use crate::recording::Recording;

/// A recording read and sampled, or the one line to print before exiting 2. It is read
/// one process at a time, as `report` reads it (`Recording::processes`), so that memory
/// grows with the groups and the processes alive at once, not with the recording.
fn load(path: &Path, by: GroupBy, folded: bool) -> Result<(Side, Option<String>), String> {
    let recording = Recording::open(path).map_err(|e| e.to_string())?;
    let start = recording.stream_start(false).map_err(|e| e.to_string())?;
    let version = recording.meta.get("schema_version").cloned();
    let loaders = InterpCache::default();
    let is_static = |p: &[u8]| loaders.is_static(p);
    let ctx = Context {
        groupings: diff::groupings(by),
        // The diff's rows come from the side's own tallies: of the report's rows, only
        // those its hints read are built.
        group_rows: Some(0),
        processes: false,
        folded,
        ..Context::for_run(&is_static)
    };
    let mut side = SideBuilder::default();
    let report = recording
        .report(&ctx, start, false, &mut |_, _, _, added| {
            side.add(&added);
            Ok(())
        })
        .map_err(|e| format!("{e:#}"))?;
    Ok((side.finish(report), version))
}

/// BEFORE's recordings and AFTER's, or the one line to print before exiting 2.
fn sides(args: &DiffArgs) -> Result<(&[PathBuf], &[PathBuf]), String> {
    match (args.before.len(), args.after.len()) {
        (2, 0) => Ok(args.before.split_at(1)),
        (n, 0) => Err(format!(
            "diff takes BEFORE AFTER, or BEFORE... -- AFTER... (got {n} recording{} and no `--`)",
            if n == 1 { "" } else { "s" }
        )),
        _ => Ok((&args.before, &args.after)),
    }
}

pub fn run(args: DiffArgs) -> Result<i32> {
    let by = GroupBy::from(args.by);
    let folded = args.flamegraph.is_some();
    let (before_paths, after_paths) = match sides(&args) {
        Ok(s) => s,
        Err(line) => {
            eprintln!("forkprof: {line}");
            return Ok(EXIT_BAD_RECORDING);
        }
    };
    // The recordings load at once, one thread each.
    let paths: Vec<&PathBuf> = before_paths.iter().chain(after_paths).collect();
    if let Some(out) = &args.flamegraph {
        let inputs: Vec<(&str, &std::path::Path)> =
            paths.iter().map(|p| ("a recording", p.as_path())).collect();
        if let Some(why) = crate::cli::refuse_outputs(&inputs, &[("--flamegraph", out)]) {
            eprintln!("forkprof: {why}");
            return Ok(2);
        }
    }
    let loaded: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .iter()
            .map(|p| s.spawn(move || load(p, by, folded)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("loading a recording panicked"))
            .collect()
    });
    let mut sides = Vec::with_capacity(loaded.len());
    let mut versions = Vec::with_capacity(loaded.len());
    for side in loaded {
        match side {
            Ok((side, version)) => {
                sides.push(side);
                versions.push(version);
            }
            Err(line) => {
                eprintln!("forkprof: {line}");
                return Ok(EXIT_BAD_RECORDING);
            }
        }
    }
    let after = Side::merge(sides.split_off(before_paths.len()));
    let before = Side::merge(sides);
    let (nb, na) = (before.processes(), after.processes());
    if !before.shares_a_group_with(&after) && (nb == 0 || na == 0) {
        eprintln!(
            "forkprof: nothing to compare: BEFORE has {nb} processes and AFTER has {na}, with no {} in common",
            by.name()
        );
        return Ok(EXIT_BAD_RECORDING);
    }
    let mut diff = compare(&before, &after, by, args.noise);
    let names = |ps: &[PathBuf]| ps.iter().map(|p| p.display().to_string()).collect();
    diff.before = names(before_paths);
    diff.after = names(after_paths);
    let mut distinct: Vec<String> = versions
        .iter()
        .map(|v| v.as_deref().unwrap_or("?").to_string())
        .collect();
    distinct.sort();
    distinct.dedup();
    if distinct.len() > 1 {
        diff.notes.push(format!(
            "the recordings have different schema versions ({}); all read fine",
            distinct.join(" and ")
        ));
    }
    if let Some(path) = &args.flamegraph {
        let owner = InvokingUser::from_env()?;
        let mut f = std::io::BufWriter::new(create_private_file(path, owner.as_ref())?);
        output::diff::write_svg(&before.reports, &after.reports, &mut f)?;
        f.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Buffered: stdout alone flushes at every line.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match args.format {
        Format::Table => output::diff::write_table(&diff, args.top, &mut out)?,
        Format::Json => output::diff::write_json(&diff, &mut out)?,
        Format::Csv => output::diff::write_csv(&diff, &mut out)?,
    }
    out.flush()?;
    Ok(0)
}
