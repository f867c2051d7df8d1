//! The human report: a summary, then phase, binary and parent tables (comfy-table).
use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;

use super::duration;
use super::width::{self, Column, Wrap};
use crate::model::{
    Report,
    phases::{PHASES, Phase, PhaseMap},
    report::GroupRow,
    stats::Summary,
    trace::ExitStatus,
};

/// `cols` as one table: every column at its natural width when `width` is `None` (a pipe or
/// a file), else fitted to `width`, with a line naming the columns left out. Returns the
/// headers of those left out.
fn render(cols: &[Column], width: Option<usize>, out: &mut dyn Write) -> Result<Vec<String>> {
    let Some(w) = width else {
        writeln!(out, "{}", width::natural(cols))?;
        return Ok(Vec::new());
    };
    let fitted = width::fit(cols, w);
    writeln!(out, "{}", fitted.table)?;
    if let Some(note) = width::left_out_note(&fitted.left_out, w) {
        writeln!(out, "{note}")?;
    }
    Ok(fitted.left_out)
}

/// A line of prose, broken at spaces to fit `width` (later lines start with `indent`).
fn prose(out: &mut dyn Write, width: Option<usize>, text: &str, indent: &str) -> Result<()> {
    match width {
        None => writeln!(out, "{text}")?,
        Some(w) => writeln!(out, "{}", width::wrap_prose(text, indent, w))?,
    }
    Ok(())
}

/// "  a   b   c", broken between items to fit `width`.
fn items(out: &mut dyn Write, width: Option<usize>, items: &[String]) -> Result<()> {
    match width {
        None => writeln!(out, "  {}", items.join("   "))?,
        Some(w) => writeln!(out, "{}", width::wrap_items("  ", items, "   ", "  ", w))?,
    }
    Ok(())
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
    /// The grouping's groups, those without a row (`Context::group_rows`) included.
    groups: usize,
    /// What each row is called: its key, or on a terminal a shortened path.
    labels: &'a [String],
    /// How many rows to show.
    top: usize,
    /// The terminal's width; `None`: a pipe or a file.
    width: Option<usize>,
}

/// A section's first column, what its rows are: paths break after a `/`, other keys at
/// spaces.
fn key_column(first: &str, labels: Vec<String>) -> Column {
    let wrap = if first.ends_with("binary") {
        Wrap::Path
    } else {
        Wrap::Words
    };
    Column::new(first, labels).left(wrap)
}

fn group_table(s: &Section, out: &mut dyn Write) -> Result<()> {
    let Section {
        title,
        first,
        rows,
        groups,
        labels,
        top,
        width,
    } = *s;
    writeln!(out)?;
    prose(out, width, title, "")?;
    let shown = || rows.iter().zip(labels).take(top);
    let col = |header: &str, f: &dyn Fn(&GroupRow) -> String| {
        Column::new(header, shown().map(|(r, _)| f(r)).collect())
    };
    let total = |r: &GroupRow| phase_total(&r.phases, Phase::SpawnCost);
    // What `--sort p99` orders by; the first column to go where the terminal is narrow.
    let p99 = |r: &GroupRow| match r.phases.get(Phase::SpawnCost) {
        Some(s) if s.count > 0 => duration(s.p99),
        _ => "-".into(),
    };
    let cols = [
        key_column(first, shown().map(|(_, l)| l.clone()).collect()),
        col("processes", &|r| r.processes.to_string()),
        col("execs", &|r| r.execs.to_string()).drop(5),
        col("failed execs", &|r| r.failed_execs.to_string()).drop(2),
        col("spawn cost total", &|r| total(r).0),
        col("mean", &|r| total(r).1).drop(3),
        col("p99", &|r| p99(r)).drop(6),
        col("methods", &|r| methods(&r.methods))
            .left(Wrap::Items)
            .drop(4),
    ];
    render(&cols, width, out)?;
    if groups > top {
        writeln!(out, "({} more; --top N shows more)", groups - top)?;
    }
    Ok(())
}

/// Mean of each phase per binary ("-" where not measured). On a terminal, as many tables
/// side by side as its width needs, each starting with the binary.
fn breakdown_table(s: &Section, out: &mut dyn Write) -> Result<()> {
    let Section {
        first,
        rows,
        labels,
        top,
        width,
        ..
    } = *s;
    writeln!(out)?;
    let title = format!("{}: phase means (percentiles in --json)", s.title);
    prose(out, width, &title, "")?;
    let shown: Vec<(&GroupRow, &String)> = rows
        .iter()
        .zip(labels)
        .filter(|(r, _)| r.processes > 0)
        .take(top)
        .collect();
    let key = key_column(first, shown.iter().map(|(_, l)| (*l).clone()).collect());
    let phases: Vec<Column> = std::iter::once(Phase::SpawnCost)
        .chain(Phase::BREAKDOWN)
        .map(|phase| {
            let cells = shown.iter().map(|(r, _)| match r.phases.get(phase) {
                Some(s) if s.count > 0 => value(phase, s.mean),
                _ => "-".into(),
            });
            Column::new(phase.name(), cells.collect())
        })
        .collect();
    match width {
        None => {
            let mut cols = vec![key];
            cols.extend(phases);
            render(&cols, None, out)?;
        }
        Some(w) => {
            for t in width::split(&key, &phases, w) {
                writeln!(out, "{t}")?;
            }
        }
    }
    Ok(())
}

/// The report, fitted to `width` when it goes to a terminal (`width::stdout()`,
/// `width::stderr()`); `None` (a pipe or a file): every column, full paths.
pub fn write(report: &Report, top: usize, width: Option<usize>, out: &mut dyn Write) -> Result<()> {
    let s = &report.summary;
    let how = match report.exit {
        Some(ExitStatus::Code(c)) => format!("exited {c}"),
        Some(ExitStatus::Signal(sig)) => format!("was killed by signal {sig}"),
        None => "ran".to_string(),
    };
    writeln!(out)?;
    // The run's whole time; a `--from`/`--to` report says which part of it it covers.
    let run_ns = report.window.map_or(report.wall_ns, |w| w.run_ns);
    let mut text = if report.command.is_empty() {
        // `record`: no command, the system or a process tree for a while.
        format!("forkprof: a recording of {}", duration(run_ns))
    } else {
        format!(
            "forkprof: `{}` {how} after {}",
            report.command.join(" "),
            duration(run_ns)
        )
    };
    if let Some(w) = report.window {
        text.push_str(&format!(
            "; this report covers {} to {} of it",
            duration(w.from_ns),
            duration(w.to_ns)
        ));
    }
    prose(out, width, &text, "  ")?;
    if report.unfinished {
        prose(
            out,
            width,
            "  unfinished: the recorder stopped before the end (it was killed, or could not \
             write); what it committed is here, and what came after is neither here nor \
             counted as lost",
            "    ",
        )?;
    }
    let mut counts = vec![
        format!("processes {}", s.processes),
        format!("threads {}", s.threads),
        format!("execs {}", s.execs),
        format!("failed execs {}", s.failed_execs),
        format!("failed spawns {}", s.failed_spawns),
        format!("still running {}", s.still_running),
    ];
    if s.spawns_child_unseen > 0 {
        counts.push(format!(
            "spawns whose child was not seen {}",
            s.spawns_child_unseen
        ));
    }
    items(out, width, &counts)?;
    items(
        out,
        width,
        &[
            format!(
                "spawn rate: mean {:.1}/s, peak {:.1}/s",
                s.spawn_rate_mean_per_s, s.spawn_rate_peak_per_s
            ),
            format!("atime updates {}", s.atime_updates),
            format!("lost events {}", s.lost_events),
        ],
    )?;
    if s.lost_events > 0 {
        let mut dropped = match s.lost.recording_dropped {
            0 => String::new(),
            n => format!(", not recorded {n}"),
        };
        if s.lost.ia32_unseen > 0 {
            dropped.push_str(&format!(
                ", spawns of 32-bit processes unseen {} (--ia32-syscalls always sees them)",
                s.lost.ia32_unseen
            ));
        }
        if s.lost.exit_unseen > 0 {
            dropped.push_str(&format!(", exits unseen {}", s.lost.exit_unseen));
        }
        let text = format!(
            "  WARNING: {} events lost (ring buffer full {}, state map full {}, undecodable {}{dropped}): totals are incomplete",
            s.lost_events, s.lost.ringbuf_full, s.lost.state_map_full, s.lost.undecodable
        );
        prose(out, width, &text, "    ")?;
    }
    let text = format!(
        "  spawn cost {} in all = {:.1}% of wall time",
        duration(report.phases.get(Phase::SpawnCost).map_or(0, |p| p.total)),
        100.0 * s.spawn_cost_share_of_wall
    );
    prose(out, width, &text, "    ")?;
    if s.processes == 0 {
        // A selection (`--filter`, `--from`/`--to`) that holds nothing, or a recording of an
        // idle system: one line, not a page of empty tables.
        writeln!(out, "  no processes: no phases, groups or hints to show")?;
        return Ok(());
    }
    let text = format!("  methods: {}", methods(&report.methods));
    prose(out, width, &text, "    ")?;

    writeln!(out, "\nPhases (per process)")?;
    let mut cells: [Vec<String>; 7] = Default::default();
    for phase in PHASES {
        // A recording made before a phase had a source says nothing about it.
        let source = report.sources.get(phase).cloned().unwrap_or_else(|| {
            if phase == Phase::SpawnCost {
                Phase::spawn_cost_source()
            } else {
                "not recorded".into()
            }
        });
        let row = match report.phases.get(phase) {
            Some(p) => [
                phase.name().to_string(),
                p.count.to_string(),
                value(phase, p.total),
                value(phase, p.mean),
                value(phase, p.p50),
                value(phase, p.p99),
                source,
            ],
            None => [
                phase.name().to_string(),
                "0".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                source,
            ],
        };
        for (col, cell) in cells.iter_mut().zip(row) {
            col.push(cell);
        }
    }
    let [phase, count, total, mean, p50, p99, source] = cells;
    let (source, notes) = width::footnotes(source);
    let cols = [
        Column::new("phase", phase).left(Wrap::Never),
        Column::new("count", count).drop(1),
        Column::new("total", total).drop(3),
        Column::new("mean", mean),
        Column::new("p50", p50).drop(4),
        Column::new("p99", p99).drop(2),
        Column::new("source", source).left(Wrap::Words).drop(5),
    ];
    let left_out = render(&cols, width, out)?;
    if !left_out.iter().any(|h| h == "source") {
        for (i, note) in notes.iter().enumerate() {
            prose(out, width, &format!("  [{}] {note}", i + 1), "      ")?;
        }
    }
    for (by, rows) in &report.groups {
        let (title, first) = match *by {
            "binary" => ("Binaries", "binary"),
            "parent" => ("Parents (their children's spawns)", "parent binary"),
            "method" => ("Methods", "method"),
            "cgroup" => (
                "Cgroups (where each process exec'd, else was created)",
                "cgroup",
            ),
            "unit" => ("Units and containers", "unit"),
            _ => ("Ancestries", "ancestry"),
        };
        let keys: Vec<&str> = rows.iter().map(|r| r.binary.as_str()).collect();
        let labels = match (width, *by) {
            (Some(_), "binary" | "parent") => width::short_paths(&keys),
            _ => keys.iter().map(|k| k.to_string()).collect(),
        };
        let section = Section {
            title,
            first,
            rows,
            groups: report.group_count(by),
            labels: &labels,
            top,
            width,
        };
        group_table(&section, out)?;
        breakdown_table(&section, out)?;
    }
    if !report.hints.is_empty() {
        writeln!(out, "\nHints")?;
        for h in &report.hints {
            prose(out, width, &format!("  - {}", h.text), "    ")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::model::Trace;
    use crate::model::report::{Context, Report};
    use crate::model::tests_support::{exec, key, spawn};

    /// A `record` has no command: its header says what it is, not "`` ran after".
    #[test]
    fn a_recording_without_a_command_says_so() {
        let mut t = Trace::default();
        t.ingest(spawn(key(1, 0), key(2, 500), 57, 17));
        t.ingest(exec(key(2, 500), 200_000, b"/bin/true", 0, 0));
        let report = Report::build(
            &t,
            &Context {
                wall_ns: 10_000_000_000,
                ..Context::for_run(&|_| false)
            },
        );
        let mut out = Vec::new();
        super::write(&report, 5, None, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("forkprof: a recording of 10.00 s"), "{text}");
        assert!(!text.contains("``"), "{text}");
    }

    /// The report prints a shared note once, under the phase table, and not at all where
    /// the terminal is too narrow for the source column that refers to it.
    #[test]
    fn the_report_prints_a_shared_note_once_and_only_with_its_column() {
        use crate::model::phases::Phase;
        let mut t = Trace::default();
        t.ingest(spawn(key(1, 0), key(2, 500), 57, 17));
        t.ingest(exec(key(2, 500), 200_000, b"/bin/true", 0, 0));
        let mut report = Report::build(&t, &Context::for_run(&|_| false));
        let note = "32-bit processes' syscalls: on demand, none seen";
        report
            .sources
            .insert(Phase::Fork, format!("tracepoint sys_enter_clone ({note})"));
        report
            .sources
            .insert(Phase::Exec, format!("tracepoint sys_enter_execve ({note})"));
        let text = |width| {
            let mut out = Vec::new();
            super::write(&report, 5, width, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        for wide in [None, Some(200)] {
            let text = text(wide);
            assert_eq!(text.matches(note).count(), 1, "{text}");
            assert!(text.contains(&format!("\n  [1] {note}\n")), "{text}");
            assert!(text.contains("tracepoint sys_enter_execve [1]"), "{text}");
        }
        let narrow = text(Some(60));
        assert!(!narrow.contains("[1]"), "{narrow}");
        assert!(!narrow.contains(note), "{narrow}");
    }

    /// A table built with only its `--top` rows (`Context::group_rows`) reads as the one
    /// built with every row: the same text, "N more" counting the rows it did not build.
    #[test]
    fn a_table_of_its_top_rows_reads_as_one_of_every_row() {
        let mut t = Trace::default();
        for i in 0..7u32 {
            let child = key(10 + i, 500 + u64::from(i));
            t.ingest(spawn(key(1, 0), child, 57, 17));
            let path = format!("/tmp/t{i}/tool");
            t.ingest(exec(child, 200_000 + u64::from(i), path.as_bytes(), 0, 0));
        }
        let text = |group_rows| {
            let report = Report::build(
                &t,
                &Context {
                    group_rows,
                    ..Context::for_run(&|_| false)
                },
            );
            let mut out = Vec::new();
            super::write(&report, 3, None, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let every = text(None);
        assert!(every.contains("(4 more; --top N shows more)"), "{every}");
        assert_eq!(text(Some(3)), every);
    }
}
