//! `forkprof bench`'s outputs: its table of rows and ratios, and its JSON.
use std::io::Write;

use anyhow::Result;

use super::width::{self, Column, Wrap};
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
/// Fitted to `width` when it goes to a terminal (`width::stdout()`): the phase columns go on
/// in as many tables as the width needs, each starting with the experiment. `None` (a pipe
/// or a file): every column.
pub fn table(
    rows: &[RowResult],
    ratios: &[Ratio],
    width: Option<usize>,
    out: &mut dyn Write,
) -> Result<()> {
    let first = [
        Column::new("experiment", rows.iter().map(|r| r.name.clone()).collect()).left(Wrap::Words),
        Column::new(
            "µs/iter",
            rows.iter()
                .map(|r| format!("{:.1}", r.us_per_iter))
                .collect(),
        ),
        Column::new(
            "traced overhead",
            rows.iter()
                .map(|r| format!("{:+.1}%", 100.0 * r.tracing_overhead))
                .collect(),
        ),
        Column::new(
            "spawn_cost coverage",
            rows.iter()
                .map(|r| format!("{:.0}%", 100.0 * r.spawn_cost_coverage))
                .collect(),
        ),
    ];
    let phases = Phase::BENCH_COLUMNS.iter().map(|&phase| {
        let cells = rows.iter().map(|r| match r.phases_us.get(phase) {
            Some(v) => format!("{v:.1}"),
            None => "-".into(),
        });
        Column::new(phase.name(), cells.collect())
    });
    let mut cols: Vec<Column> = first.into_iter().chain(phases).collect();
    let title = format!(
        "Per iteration (µs; {}: faults). Phase columns: means over the spawned processes.",
        Phase::CowFaults.name()
    );
    match width {
        None => {
            writeln!(out, "{title}")?;
            writeln!(out, "{}", width::natural(&cols))?;
            writeln!(out, "\nRatios")?;
            for r in ratios {
                writeln!(out, "  {}", r.text)?;
            }
        }
        Some(w) => {
            let key = cols.remove(0);
            writeln!(out, "{}", width::wrap_prose(&title, "", w))?;
            for t in width::split(&key, &cols, w) {
                writeln!(out, "{t}")?;
            }
            writeln!(out, "\nRatios")?;
            for r in ratios {
                writeln!(
                    out,
                    "{}",
                    width::wrap_prose(&format!("  {}", r.text), "    ", w)
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::phases::PHASES;

    fn row(name: &str) -> RowResult {
        RowResult {
            name: name.into(),
            us_per_iter: 1234.5,
            us_per_iter_traced: 1300.0,
            phases_us: Phase::BENCH_COLUMNS.iter().map(|&p| (p, 12345.6)).collect(),
            spawn_cost_coverage: 0.93,
            tracing_overhead: 0.052,
            ..Default::default()
        }
    }

    fn render(width: Option<usize>) -> String {
        let rows = [
            row("fork+exec dynamic"),
            row("vfork+_exit static parent"),
            row("fork rss 1024 MiB"),
        ];
        let mut out = Vec::new();
        table(&rows, &[], width, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// At 100 columns no line is wider, and every phase name and experiment word is whole.
    #[test]
    fn the_table_fits_100_columns() {
        let text = render(Some(100));
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{line}\n{text}");
        }
        let cells: Vec<&str> = text
            .lines()
            .flat_map(|l| l.split(['│', '┆']))
            .map(str::trim)
            .collect();
        for p in Phase::BENCH_COLUMNS {
            assert!(cells.contains(&p.name()), "{} not whole:\n{text}", p.name());
        }
        for word in [
            "fork+exec",
            "vfork+_exit",
            "experiment",
            "µs/iter",
            "1234.5",
        ] {
            assert!(text.contains(word), "{word}:\n{text}");
        }
        // Every phase name in a cell is a whole one: no piece of a name.
        let names: Vec<&str> = PHASES.iter().map(|p| p.name()).collect();
        for c in cells.iter().filter(|c| c.contains('_') && !c.contains(' ')) {
            assert!(
                names.contains(c) || c.starts_with("vfork+"),
                "`{c}`:\n{text}"
            );
        }
    }

    /// A pipe gets one table with every column, as before.
    #[test]
    fn a_pipe_gets_one_wide_table() {
        let text = render(None);
        let header = text.lines().nth(2).unwrap();
        for p in Phase::BENCH_COLUMNS {
            assert!(header.contains(p.name()), "{header}");
        }
        assert!(header.chars().count() > 200, "{header}");
    }
}
