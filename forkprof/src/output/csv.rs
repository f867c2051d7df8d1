//! One CSV row per group, one column block per phase: `PHASE_count`, then `PHASE_total`,
//! `_mean`, `_p50`, `_p90`, `_p99` and `_max` in nanoseconds (the JSON's keys and units).
use std::io::Write;

use anyhow::Result;

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
