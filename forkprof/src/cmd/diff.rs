//! `forkprof diff BEFORE AFTER`: did spawning get cheaper between two recordings, and is it real?
use std::io::Write as _;
use std::path::Path;

use anyhow::Result;

use crate::cli::{DiffArgs, Format};
use crate::cmd::report::EXIT_BAD_RECORDING;
use crate::elf::InterpCache;
use crate::model::diff::{Side, compare};
use crate::model::report::{Context, GroupBy};
use crate::output;
use crate::privilege::{InvokingUser, create_private_file};
use crate::recording::Recording;

/// A recording loaded and sampled, or the one line to print before exiting 2.
fn load(path: &Path, by: GroupBy, folded: bool) -> Result<(Side, Option<String>), String> {
    let recording = Recording::open(path).map_err(|e| e.to_string())?;
    let trace = recording.load(false).map_err(|e| e.to_string())?;
    let version = recording.meta.get("schema_version").cloned();
    // The hints look at binaries and parents: both are grouped, whatever `--by` is.
    let mut groupings = vec![by];
    for g in [GroupBy::Binary, GroupBy::Parent] {
        if !groupings.contains(&g) {
            groupings.push(g);
        }
    }
    let loaders = InterpCache::default();
    let is_static = |p: &[u8]| loaders.is_static(p);
    let ctx = Context {
        groupings,
        processes: false,
        folded,
        ..Context::for_run(&is_static)
    };
    Ok((Side::build(&trace, &ctx, by), version))
}

pub fn run(args: DiffArgs) -> Result<i32> {
    let by = GroupBy::from(args.by);
    let folded = args.flamegraph.is_some();
    // The two recordings load at once, one thread each.
    let (b, a) = std::thread::scope(|s| {
        let b = s.spawn(|| load(&args.before, by, folded));
        let a = load(&args.after, by, folded);
        (b.join().expect("loading BEFORE panicked"), a)
    });
    let mut sides = Vec::with_capacity(2);
    for side in [b, a] {
        match side {
            Ok(side) => sides.push(side),
            Err(line) => {
                eprintln!("forkprof: {line}");
                return Ok(EXIT_BAD_RECORDING);
            }
        }
    }
    let (after, after_version) = sides.pop().expect("two sides");
    let (before, before_version) = sides.pop().expect("two sides");
    let common = before.groups.keys().any(|k| after.groups.contains_key(k));
    let (nb, na) = (
        before.report.summary.processes,
        after.report.summary.processes,
    );
    if !common && (nb == 0 || na == 0) {
        eprintln!(
            "forkprof: nothing to compare: {} has {nb} processes and {} has {na}, with no {} in common",
            args.before.display(),
            args.after.display(),
            by.name()
        );
        return Ok(EXIT_BAD_RECORDING);
    }
    let mut diff = compare(&before, &after, by, args.noise);
    diff.before = args.before.display().to_string();
    diff.after = args.after.display().to_string();
    if before_version != after_version {
        diff.notes.push(format!(
            "the recordings have different schema versions ({} and {}); both read fine",
            before_version.as_deref().unwrap_or("?"),
            after_version.as_deref().unwrap_or("?")
        ));
    }
    if let Some(path) = &args.flamegraph {
        let owner = InvokingUser::from_env()?;
        let mut f = create_private_file(path, owner.as_ref())?;
        output::diff::write_svg(&before.report, &after.report, &mut f)?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.format {
        Format::Table => output::diff::write_table(&diff, args.top, &mut out)?,
        Format::Json => output::diff::write_json(&diff, &mut out)?,
        Format::Csv => output::diff::write_csv(&diff, &mut out)?,
    }
    out.flush()?;
    Ok(0)
}
