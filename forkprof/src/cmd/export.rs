//! `forkprof export FILE --parquet OUT`: one row per process of a recording, as Apache
//! Parquet, for querying the recordings of many hosts together (DuckDB, Spark, Trino).
use anyhow::Result;

use crate::cli::ExportArgs;

#[cfg(feature = "parquet")]
pub use enabled::run;

/// Built without the `parquet` feature (the fuzz targets are): the command says so.
#[cfg(not(feature = "parquet"))]
pub fn run(_args: ExportArgs) -> Result<i32> {
    eprintln!("forkprof: this forkprof was built without Parquet export (cargo feature `parquet`)");
    Ok(1)
}

#[cfg(feature = "parquet")]
mod enabled {
    use super::{ExportArgs, Result};
    use crate::cli::refuse_overwrite;
    use crate::cmd::{bad_recording_or, open_recording};
    use crate::elf::InterpCache;
    use crate::model::processes::ProcessView;
    use crate::model::trace::{Binaries, Origin};
    use crate::model::{Process, Trace};
    use crate::output::parquet::{self, FileInfo};
    use crate::privilege::{InvokingUser, create_private_file};

    /// The recording's meta keys copied to the Parquet footer, as `forkprof.KEY`.
    const META_KEPT: [&str; 6] = [
        "host",
        "kernel",
        "mode",
        "command",
        "started_unix_ms",
        "schema_version",
    ];

    pub fn run(args: ExportArgs) -> Result<i32> {
        // Bad input is refused (exit 2) before anything is read or written.
        if let Some(why) = refuse_overwrite(&args.parquet, args.force) {
            eprintln!("forkprof: {why}");
            return Ok(2);
        }
        // With --force too: the recording is never its own export.
        if let Some(why) =
            crate::cli::refuse_outputs(&[("FILE", &args.file)], &[("--parquet", &args.parquet)])
        {
            eprintln!("forkprof: {why}");
            return Ok(2);
        }
        // Exec arguments are not exported: they are never read.
        let (recording, start) = match open_recording(&args.file, false) {
            Ok(opened) => opened,
            Err(code) => return Ok(code),
        };
        let mut metadata = vec![(
            "forkprof.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )];
        metadata.extend(META_KEPT.iter().filter_map(|&k| {
            let v = recording.meta.get(k)?;
            Some((format!("forkprof.{k}"), v.clone()))
        }));
        let info = FileInfo {
            host: args.host.or_else(|| recording.meta.get("host").cloned()),
            metadata,
        };
        // Static binaries are recognised as `report` does, so spawn_cost is the same.
        let loaders = InterpCache::default();
        let is_static = |p: &[u8]| loaders.is_static(p);
        let owner = InvokingUser::from_env()?;
        let file = create_private_file(&args.parquet, owner.as_ref())?;
        crate::cmd::remove_on_signal(&args.parquet)?;
        // Rows are written as the processes complete (see `model::assemble`): memory
        // stays flat whatever the recording's size.
        let written = (|| {
            let mut w = parquet::Writer::new(&info, file)?;
            let mut sink = |trace: &Trace, p: &Process, bins: &Binaries, _: &Origin| {
                w.push(&ProcessView::of(trace, p, bins.clone(), &is_static))
            };
            match recording.processes(start, false, &mut sink) {
                Ok(_) => w.finish(),
                Err(e) => Err(e),
            }
        })();
        match written {
            Ok((n, _)) => {
                eprintln!(
                    "forkprof: {n} processes written to {}",
                    args.parquet.display()
                );
                Ok(0)
            }
            Err(e) => {
                // No half-written file is left behind (a full disk, say).
                crate::cmd::remove_partial(&args.parquet);
                // A recording found corrupt part way through is bad input (exit 2).
                bad_recording_or(e)
                    .map_err(|e| e.context(format!("cannot write {}", args.parquet.display())))
            }
        }
    }
}
