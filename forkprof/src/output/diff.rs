//! Renderers of a `Diff` (`forkprof diff`): tables, JSON, CSV and a differential flame graph.
use std::io::Write;

use anyhow::Result;
use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

use super::duration;
use crate::model::Report;
use crate::model::diff::{Diff, LEVEL, Stats, Status};

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_width(160);
    t.set_header(header.to_vec());
    for column in t.column_iter_mut().skip(2) {
        column.set_cell_alignment(CellAlignment::Right);
    }
    t
}

/// "+1.2 ms" / "-340 ns".
fn signed(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "+" };
    format!("{sign}{}", duration(ns.unsigned_abs()))
}

/// What a hint's group's spawn cost moved by, in words: " (saved 41.8 ms)", or, where it
/// grew, " (cost 12.0 ms more)". A hint new in AFTER saved nothing, whatever its group's
/// cost did: " (spawn cost 116.9 ms less)".
fn saved(ns: i64, status: &str) -> String {
    let amount = duration(ns.unsigned_abs());
    match (status, ns < 0) {
        ("new", true) => format!(" (spawn cost {amount} more)"),
        ("new", false) => format!(" (spawn cost {amount} less)"),
        (_, true) => format!(" (cost {amount} more)"),
        (_, false) => format!(" (saved {amount})"),
    }
}

fn mean(s: &Option<Stats>, count: bool) -> String {
    match s {
        Some(s) if count => s.mean_ns.to_string(),
        Some(s) => duration(s.mean_ns),
        None => "-".into(),
    }
}

fn count(s: &Option<Stats>) -> String {
    s.as_ref().map_or("-".into(), |s| s.processes.to_string())
}

fn ratio(r: Option<f64>, ci: Option<[f64; 2]>) -> String {
    match (r, ci) {
        (Some(r), Some([lo, hi])) => format!("{r:.2}× [{lo:.2}, {hi:.2}]"),
        (Some(r), None) => format!("{r:.2}×"),
        _ => "-".into(),
    }
}

pub fn write_table(diff: &Diff, top: usize, out: &mut dyn Write) -> Result<()> {
    let side = |paths: &[String]| match paths {
        [one] => one.clone(),
        many => format!("{} recordings ({})", many.len(), many.join(" ")),
    };
    writeln!(
        out,
        "\nforkprof diff: {} → {}",
        side(&diff.before),
        side(&diff.after)
    )?;
    writeln!(
        out,
        "  by {}; ratio = mean spawn cost after / before, [{:.0}% interval]; within ±{}% is noise",
        diff.by,
        LEVEL * 100.0,
        diff.noise
    )?;
    for note in &diff.notes {
        writeln!(out, "  note: {note}")?;
    }
    let mut t = table(&[
        diff.by,
        "status",
        "processes",
        "mean before",
        "mean after",
        "ratio [interval]",
        "total change",
        "moved most",
    ]);
    for r in diff.rows.iter().take(top) {
        let moved = match (r.moved_phase, r.moved_ns) {
            (Some(p), Some(ns)) => format!("{p} {}", signed(ns)),
            _ => "-".into(),
        };
        t.add_row(vec![
            Cell::new(&r.group),
            Cell::new(r.status.text()),
            Cell::new(format!("{} → {}", count(&r.before), count(&r.after))),
            Cell::new(mean(&r.before, false)),
            Cell::new(mean(&r.after, false)),
            Cell::new(ratio(r.ratio, r.ci)),
            Cell::new(signed(r.total_change())),
            Cell::new(moved),
        ]);
    }
    writeln!(out, "{t}")?;
    if diff.rows.len() > top {
        writeln!(out, "({} more; --top N shows more)", diff.rows.len() - top)?;
    }
    writeln!(out, "\nPhases (whole recording)")?;
    let mut t = table(&[
        "phase",
        "status",
        "count",
        "mean before",
        "mean after",
        "ratio [interval]",
        "total before",
        "total after",
    ]);
    for p in &diff.phases {
        let is_count = p.phase.is_count();
        let total = |s: &Option<Stats>| match s {
            Some(s) if is_count => s.total_ns.to_string(),
            Some(s) => duration(s.total_ns),
            None => "-".into(),
        };
        t.add_row(vec![
            Cell::new(p.phase.name()),
            Cell::new(p.status.text()),
            Cell::new(format!("{} → {}", count(&p.before), count(&p.after))),
            Cell::new(mean(&p.before, is_count)),
            Cell::new(mean(&p.after, is_count)),
            Cell::new(ratio(p.ratio, p.ci)),
            Cell::new(total(&p.before)),
            Cell::new(total(&p.after)),
        ]);
    }
    writeln!(out, "{t}")?;
    if !diff.hints.is_empty() {
        writeln!(out, "\nHints re-checked")?;
        for h in &diff.hints {
            let saved = h.saved_ns.map(|ns| saved(ns, h.status)).unwrap_or_default();
            writeln!(out, "  - {}{saved}: {}", h.status, h.text)?;
        }
    }
    let count = |status: Status| diff.rows.iter().filter(|r| r.status == status).count();
    // Groups only on one side are the change too (a binary replaced by another).
    let mut line = format!(
        "{} of {} groups changed significantly",
        count(Status::Changed),
        diff.rows.len()
    );
    for (status, n) in [
        (Status::New, count(Status::New)),
        (Status::Gone, count(Status::Gone)),
    ] {
        if n > 0 {
            line += &format!(", {n} {}", status.text());
        }
    }
    writeln!(out, "\n{line}")?;
    Ok(())
}

pub fn write_json(diff: &Diff, out: &mut dyn Write) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, diff)?;
    writeln!(out)?;
    Ok(())
}

/// One row per group.
pub fn write_csv(diff: &Diff, out: &mut dyn Write) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let mut header = vec![diff.by.to_string(), "status".into()];
    for side in ["before", "after"] {
        for col in ["processes", "mean_ns", "total_ns"] {
            header.push(format!("{side}_{col}"));
        }
    }
    header.extend(["ratio", "ci_lo", "ci_hi", "moved_phase", "moved_ns"].map(String::from));
    w.write_record(&header)?;
    let opt = |v: Option<String>| v.unwrap_or_default();
    for r in &diff.rows {
        let mut rec = vec![r.group.clone(), r.status.text().to_string()];
        for s in [&r.before, &r.after] {
            match s {
                Some(s) => rec.extend([s.processes, s.mean_ns, s.total_ns].map(|v| v.to_string())),
                None => rec.extend(std::iter::repeat_n(String::new(), 3)),
            }
        }
        rec.push(opt(r.ratio.map(|v| v.to_string())));
        rec.push(opt(r.ci.map(|c| c[0].to_string())));
        rec.push(opt(r.ci.map(|c| c[1].to_string())));
        rec.push(opt(r.moved_phase.map(String::from)));
        rec.push(opt(r.moved_ns.map(|v| v.to_string())));
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// A differential flame graph of spawn cost by ancestry: widths are AFTER's cost, red where
/// it grew, blue where it shrank (inferno's differential mode).
pub fn write_svg(before: &[Report], after: &[Report], out: &mut dyn Write) -> Result<()> {
    // Several recordings a side: their stacks add up (inferno sums repeated stacks), and
    // when the sides have different numbers of recordings, BEFORE is scaled to AFTER's total.
    let text = |rs: &[Report]| {
        rs.iter()
            .flat_map(super::flamegraph::folded_lines)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (b, a) = (text(before), text(after));
    if b.is_empty() && a.is_empty() {
        anyhow::bail!("nothing to draw: no process in either recording has a spawn cost");
    }
    let options = inferno::differential::Options {
        normalize: before.len() != after.len(),
        ..Default::default()
    };
    let mut folded = Vec::new();
    inferno::differential::from_readers(options, b.as_bytes(), a.as_bytes(), &mut folded)?;
    let folded = String::from_utf8(folded)?;
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "forkprof diff: spawn cost by process ancestry".into();
    opts.subtitle = Some("widths: AFTER; red: more cost than BEFORE, blue: less".into());
    opts.count_name = "ns".into();
    inferno::flamegraph::from_lines(&mut opts, folded.lines(), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A hint whose group got dearer says so, not "saved -12.0 ms".
    #[test]
    fn a_hint_whose_group_got_dearer_says_what_it_cost() {
        assert_eq!(super::saved(41_790_000, "resolved"), " (saved 41.8 ms)");
        assert_eq!(
            super::saved(-12_000_000, "still triggered"),
            " (cost 12.0 ms more)"
        );
        assert_eq!(super::saved(0, "resolved"), " (saved 0 ns)");
        // A hint that appeared saved nothing.
        assert_eq!(
            super::saved(116_900_000, "new"),
            " (spawn cost 116.9 ms less)"
        );
        assert_eq!(super::saved(-5_000, "new"), " (spawn cost 5.0 µs more)");
    }
}
