//! The human report: a summary, then phase, binary and parent tables (comfy-table).
use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

use super::duration;
use crate::model::{
    Report,
    phases::{PHASES, Phase, PhaseMap},
    report::GroupRow,
    stats::Summary,
    trace::ExitStatus,
};

fn new_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(160)
        .set_header(header.iter().map(Cell::new));
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn methods(m: &BTreeMap<&'static str, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn value(phase: Phase, v: u64) -> String {
    if phase.is_count() {
        v.to_string()
    } else {
        duration(v)
    }
}

fn phase_total(phases: &PhaseMap<Summary>, phase: Phase) -> (String, String) {
    match phases.get(phase) {
        Some(s) if s.count > 0 => (duration(s.total), duration(s.mean)),
        _ => ("-".into(), "-".into()),
    }
}

/// The rows of one grouping, shown as two tables: totals, then phase means.
struct Section<'a> {
    title: &'a str,
    /// The first column's name: what the rows are.
    first: &'a str,
    rows: &'a [GroupRow],
    /// How many rows to show.
    top: usize,
}

fn group_table(s: &Section, out: &mut dyn Write) -> Result<()> {
    let Section {
        title,
        first,
        rows,
        top,
    } = *s;
    writeln!(out, "\n{title}")?;
    let mut t = new_table(&[
        first,
        "processes",
        "execs",
        "failed execs",
        "spawn cost total",
        "mean",
        "methods",
    ]);
    for r in rows.iter().take(top) {
        let (total, mean) = phase_total(&r.phases, Phase::SpawnCost);
        t.add_row(vec![
            Cell::new(&r.binary),
            Cell::new(r.processes),
            Cell::new(r.execs),
            Cell::new(r.failed_execs),
            Cell::new(total),
            Cell::new(mean),
            Cell::new(methods(&r.methods)),
        ]);
    }
    writeln!(out, "{t}")?;
    if rows.len() > top {
        writeln!(out, "({} more; --top N shows more)", rows.len() - top)?;
    }
    Ok(())
}

/// Mean of each phase per binary ("-" where not measured).
fn breakdown_table(s: &Section, out: &mut dyn Write) -> Result<()> {
    let Section {
        first, rows, top, ..
    } = *s;
    writeln!(out, "\n{}: phase means (percentiles in --json)", s.title)?;
    let mut header = vec![first, Phase::SpawnCost.name()];
    header.extend(Phase::BREAKDOWN.iter().map(|p| p.name()));
    let mut t = new_table(&header);
    for r in rows.iter().filter(|r| r.processes > 0).take(top) {
        let mut cells = vec![Cell::new(&r.binary)];
        for phase in std::iter::once(Phase::SpawnCost).chain(Phase::BREAKDOWN) {
            cells.push(Cell::new(match r.phases.get(phase) {
                Some(s) if s.count > 0 => value(phase, s.mean),
                _ => "-".into(),
            }));
        }
        t.add_row(cells);
    }
    writeln!(out, "{t}")?;
    Ok(())
}

pub fn write(report: &Report, top: usize, out: &mut dyn Write) -> Result<()> {
    let s = &report.summary;
    let how = match report.exit {
        Some(ExitStatus::Code(c)) => format!("exited {c}"),
        Some(ExitStatus::Signal(sig)) => format!("was killed by signal {sig}"),
        None => "ran".to_string(),
    };
    writeln!(
        out,
        "\nforkprof: `{}` {how} after {}",
        report.command.join(" "),
        duration(report.wall_ns)
    )?;
    writeln!(
        out,
        "  processes {}   threads {}   execs {}   failed execs {}   failed spawns {}   still running {}",
        s.processes, s.threads, s.execs, s.failed_execs, s.failed_spawns, s.still_running
    )?;
    writeln!(
        out,
        "  spawn rate: mean {:.1}/s, peak {:.1}/s   atime updates {}   lost events {}",
        s.spawn_rate_mean_per_s, s.spawn_rate_peak_per_s, s.atime_updates, s.lost_events
    )?;
    if s.lost_events > 0 {
        let dropped = match s.lost.recording_dropped {
            0 => String::new(),
            n => format!(", not recorded {n}"),
        };
        writeln!(
            out,
            "  WARNING: {} events lost (ring buffer full {}, state map full {}, undecodable {}{dropped}): totals are incomplete",
            s.lost_events, s.lost.ringbuf_full, s.lost.state_map_full, s.lost.undecodable
        )?;
    }
    writeln!(
        out,
        "  spawn cost {} in all = {:.1}% of wall time",
        duration(report.phases.get(Phase::SpawnCost).map_or(0, |p| p.total)),
        100.0 * s.spawn_cost_share_of_wall
    )?;
    writeln!(out, "  methods: {}", methods(&report.methods))?;

    writeln!(out, "\nPhases (per process)")?;
    let mut t = new_table(&["phase", "count", "total", "mean", "p50", "p99", "source"]);
    for phase in PHASES {
        // A recording made before a phase had a source says nothing about it.
        let source = report.sources.get(phase).cloned().unwrap_or_else(|| {
            if phase == Phase::SpawnCost {
                Phase::spawn_cost_source()
            } else {
                "not recorded".into()
            }
        });
        match report.phases.get(phase) {
            Some(p) => t.add_row(vec![
                Cell::new(phase.name()),
                Cell::new(p.count),
                Cell::new(value(phase, p.total)),
                Cell::new(value(phase, p.mean)),
                Cell::new(value(phase, p.p50)),
                Cell::new(value(phase, p.p99)),
                Cell::new(source),
            ]),
            None => t.add_row(vec![
                Cell::new(phase.name()),
                Cell::new(0),
                Cell::new("-"),
                Cell::new("-"),
                Cell::new("-"),
                Cell::new("-"),
                Cell::new(source),
            ]),
        };
    }
    writeln!(out, "{t}")?;
    for (by, rows) in &report.groups {
        let (title, first) = match *by {
            "binary" => ("Binaries", "binary"),
            "parent" => ("Parents (their children's spawns)", "parent binary"),
            "method" => ("Methods", "method"),
            _ => ("Ancestries", "ancestry"),
        };
        let section = Section {
            title,
            first,
            rows,
            top,
        };
        group_table(&section, out)?;
        breakdown_table(&section, out)?;
    }
    if !report.hints.is_empty() {
        writeln!(out, "\nHints")?;
        for h in &report.hints {
            writeln!(out, "  - {}", h.text)?;
        }
    }
    Ok(())
}
