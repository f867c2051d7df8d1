//! One CSV row per group, one column block per phase: `PHASE_count`, then `PHASE_total`,
//! `_mean`, `_p50`, `_p90`, `_p99` and `_max` in nanoseconds (the JSON's keys and units).
//! Or, with `--processes`, one row per process: the columns of the Parquet export.
use std::io::Write;

use anyhow::Result;

use crate::model::processes::{COLUMNS, ProcessView, signed};
use crate::model::{PHASES, Report, report::GroupBy};

pub fn write(report: &Report, by: GroupBy, out: &mut dyn Write) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let mut header = vec![
        by.name().to_string(),
        "processes".into(),
        "execs".into(),
        "failed_execs".into(),
    ];
    for phase in PHASES {
        for stat in ["count", "total", "mean", "p50", "p90", "p99", "max"] {
            header.push(format!("{}_{stat}", phase.name()));
        }
    }
    w.write_record(&header)?;
    for row in report.group(by) {
        let mut rec = vec![
            row.binary.clone(),
            row.processes.to_string(),
            row.execs.to_string(),
            row.failed_execs.to_string(),
        ];
        for phase in PHASES {
            match row.phases.get(phase) {
                Some(s) => rec.extend(
                    [s.count, s.total, s.mean, s.p50, s.p90, s.p99, s.max].map(|v| v.to_string()),
                ),
                None => rec.extend(std::iter::repeat_n(String::new(), 7)),
            }
        }
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// One CSV row per process, written as the processes come: `processes::COLUMNS`, then one
/// column per phase (ns; a count for `cow_faults`). An empty field is a null of the Parquet
/// export: not known, or not measured.
pub struct ProcessWriter<W: Write> {
    w: csv::Writer<W>,
    host: Option<String>,
}

impl<W: Write> ProcessWriter<W> {
    /// Writes the header; `host` fills the `host` column (empty when None).
    pub fn new(out: W, host: Option<String>) -> Result<Self> {
        let mut w = csv::Writer::from_writer(out);
        w.write_record(
            COLUMNS
                .iter()
                .copied()
                .chain(PHASES.iter().map(|p| p.name())),
        )?;
        Ok(Self { w, host })
    }

    pub fn push(&mut self, v: &ProcessView<'_>) -> Result<()> {
        let f = v.fields();
        let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        let mut rec = vec![
            self.host.clone().unwrap_or_default(),
            f.pid.to_string(),
            f.start_ns.to_string(),
            opt(f.parent_pid.map(i64::from)),
            opt(f.parent_start_ns),
            f.binary,
            f.parent_binary,
            f.method.to_string(),
            f.cgroup.unwrap_or_default().to_string(),
            f.unit.unwrap_or_default().to_string(),
            opt(f.exit_code.map(i64::from)),
            opt(f.exit_signal.map(i64::from)),
            f.execs.to_string(),
            f.failed_execs.to_string(),
            f.atime_updates.to_string(),
        ];
        rec.extend(
            PHASES
                .iter()
                .map(|&phase| opt(v.phases.get(phase).map(signed))),
        );
        self.w.write_record(&rec)?;
        Ok(())
    }

    /// Flushes the rows and returns the output.
    pub fn finish(self) -> Result<W> {
        self.w
            .into_inner()
            .map_err(|e| anyhow::Error::new(e.into_error()))
    }
}
