//! Flame graphs of spawn cost: stacks are process ancestry (make;sh;gcc;cc1), widths are
//! the total `spawn_cost` (ns) of the processes with that ancestry. Rendered by inferno.
use std::io::Write;

use anyhow::Result;

use crate::model::Report;

/// Folded stacks: "make;sh;gcc;cc1 123456" per line (needs `Context::folded`).
pub fn folded_lines(report: &Report) -> Vec<String> {
    report
        .folded
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|(stack, total)| format!("{stack} {total}"))
        .collect()
}

pub fn write_folded(report: &Report, out: &mut dyn Write) -> Result<()> {
    for line in folded_lines(report) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

pub fn write_svg(report: &Report, out: &mut dyn Write) -> Result<()> {
    let lines = folded_lines(report);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "forkprof: spawn cost by process ancestry".into();
    opts.count_name = "ns".into();
    if lines.is_empty() {
        anyhow::bail!("nothing to draw: no process in the recording has a spawn cost");
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}
