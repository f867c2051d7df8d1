//! `forkprof bench`'s outputs: its table of rows and ratios, and its JSON.
use std::io::Write;

use anyhow::Result;
use comfy_table::{Cell, Table, presets::UTF8_FULL_CONDENSED};

use crate::model::bench::{Ratio, RowResult};
use crate::model::phases::Phase;

/// The JSON document of `forkprof bench --json`.
pub fn json(
    cpu: Option<usize>,
    rows: &[RowResult],
    ratios: &[Ratio],
    skipped: &[&str],
    out: &mut dyn Write,
) -> Result<()> {
    let doc = serde_json::json!({
        "cpu": cpu,
        "rows": rows,
        "ratios": ratios,
        "skipped": skipped,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

/// One line per row (µs per iteration, overhead, coverage, phase means), then the ratios.
pub fn table(rows: &[RowResult], ratios: &[Ratio], out: &mut dyn Write) -> Result<()> {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec![
        "experiment",
        "µs/iter",
        "traced overhead",
        "spawn_cost coverage",
    ];
    header.extend(Phase::BENCH_COLUMNS.iter().map(|p| p.name()));
    t.set_header(header);
    for r in rows {
        let mut row = vec![
            Cell::new(&r.name),
            Cell::new(format!("{:.1}", r.us_per_iter)),
            Cell::new(format!("{:+.1}%", 100.0 * r.tracing_overhead)),
            Cell::new(format!("{:.0}%", 100.0 * r.spawn_cost_coverage)),
        ];
        for phase in Phase::BENCH_COLUMNS {
            row.push(Cell::new(match r.phases_us.get(phase) {
                Some(v) => format!("{v:.1}"),
                None => "-".into(),
            }));
        }
        t.add_row(row);
    }
    writeln!(
        out,
        "Per iteration (µs; {}: faults). Phase columns: means over the spawned processes.",
        Phase::CowFaults.name()
    )?;
    writeln!(out, "{t}")?;
    writeln!(out, "\nRatios")?;
    for r in ratios {
        writeln!(out, "  {}", r.text)?;
    }
    Ok(())
}
