//! A forkprof row against its floor (the same hooks with empty programs), round by round.
//!
//! Each row's overhead is the median of its own pairs' ratios, so the difference of two
//! rows' medians carries both rows' noise, and their intervals overlap long after the gap
//! is real. The two rows run in the same rounds, minutes apart at most: the difference of
//! their ratios in each round (tool / its bare run less floor / its bare run) shares that
//! round's drift, and its median over the rounds, with its interval, is what "at most the
//! floor + 1 point" is about.
use std::fmt::Write as _;

use super::measure::Row;
use super::stats::{median, median_ci90};
use super::tools::Tool;

/// A row less its floor's row, in percentage points, one value per round both ran in.
pub(super) struct FloorGap {
    pub(super) run: &'static str,
    pub(super) floor: &'static str,
    /// By wall time.
    pub(super) points: Vec<f64>,
    /// By the loop's CPU time.
    pub(super) cpu_points: Vec<f64>,
}

/// Every measured row whose floor was measured too.
pub(super) fn floor_gaps(rows: &[Row]) -> Vec<FloorGap> {
    let find = |label: &str| rows.iter().find(|r| r.label == label);
    let differences = |a: &Option<Vec<f64>>, b: &Option<Vec<f64>>| match (a, b) {
        (Some(a), Some(b)) => a.iter().zip(b).map(|(a, b)| (a - b) * 100.0).collect(),
        _ => Vec::new(),
    };
    super::tools::ALL_TOOLS
        .into_iter()
        .filter_map(|tool| Some((tool, tool.floor()?)))
        .filter_map(|(tool, floor): (Tool, Tool)| {
            let (run, floor) = (find(tool.label())?, find(floor.label())?);
            let points = differences(&run.ratios, &floor.ratios);
            (!points.is_empty()).then(|| FloorGap {
                run: run.label,
                floor: floor.label,
                points,
                cpu_points: differences(&run.cpu_ratios, &floor.cpu_ratios),
            })
        })
        .collect()
}

/// `+1.4 points (90% CI +0.6 .. +2.1)`, or what is missing.
fn described(points: &[f64]) -> String {
    let Some(mid) = median(points) else {
        return "-".to_owned();
    };
    match median_ci90(points) {
        Some((lo, hi)) => format!("{mid:+.1} points (90% CI {lo:+.1} .. {hi:+.1})"),
        None => format!("{mid:+.1} points (no interval under 5 rounds)"),
    }
}

/// The lines under the table, one per gap.
pub(super) fn lines(gaps: &[FloorGap]) -> String {
    let mut out = String::new();
    for g in gaps {
        let _ = writeln!(
            out,
            "{} above {}, round by round over {} rounds: {} by wall time, {} by CPU time",
            g.run,
            g.floor,
            g.points.len(),
            described(&g.points),
            described(&g.cpu_points),
        );
    }
    if !out.is_empty() {
        out.push_str(
            "round by round: median over the rounds of (tool / its bare run) - (floor / its bare run), \
             in percentage points\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tool: Tool, ratios: &[f64], cpu: &[f64]) -> Row {
        let mut r = Row::new(tool.label(), true);
        r.ratios = Some(ratios.to_vec());
        r.cpu_ratios = Some(cpu.to_vec());
        r
    }

    #[test]
    fn each_round_is_compared_with_the_same_rounds_floor() {
        let rows = [
            Row::new("bare", false),
            row(
                Tool::Forkprof,
                &[1.06, 1.10, 1.05, 1.07, 1.20],
                &[1.05, 1.05, 1.05, 1.05, 1.05],
            ),
            row(
                Tool::ForkprofEmpty,
                &[1.04, 1.09, 1.03, 1.05, 1.18],
                &[1.04, 1.04, 1.04, 1.04],
            ),
            row(Tool::Record, &[1.5], &[1.5]),
        ];
        let gaps = floor_gaps(&rows);
        assert_eq!(gaps.len(), 1);
        let g = &gaps[0];
        assert_eq!(
            (g.run, g.floor),
            ("forkprof run", "forkprof run, empty programs")
        );
        // Each round's own difference: the medians' difference would be 2 points too, but
        // a round's drift (the fifth) moves both rows and leaves the difference.
        let rounded: Vec<i64> = g.points.iter().map(|p| (p * 10.0).round() as i64).collect();
        assert_eq!(rounded, [20, 10, 20, 20, 20]);
        // CPU: only the rounds both measured.
        assert_eq!(g.cpu_points.len(), 4);
        assert_eq!(
            lines(&gaps),
            "forkprof run above forkprof run, empty programs, round by round over 5 rounds: \
             +2.0 points (90% CI +1.0 .. +2.0) by wall time, +1.0 points (no interval under 5 rounds) by CPU time\n\
             round by round: median over the rounds of (tool / its bare run) - (floor / its bare run), \
             in percentage points\n"
        );
    }

    #[test]
    fn no_floor_row_no_gap() {
        let rows = [row(Tool::Forkprof, &[1.1], &[1.1])];
        assert!(floor_gaps(&rows).is_empty());
        assert_eq!(lines(&[]), "");
    }
}
