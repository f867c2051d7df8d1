//! `--above-floor ROUNDS`: forkprof's own work per iteration of the loop, above the floor
//! that its hooks cost by being attached.
//!
//! Each round runs the loop under `forkprof run` with kernel.bpf_stats_enabled=1 twice:
//! with the real programs, then with empty ones (FORKPROF_BENCH_EMPTY=1: the same hooks
//! attach and every program returns at entry). With `--before PATH`, another build does
//! the same right after, in the same round, so that two builds are compared under the same
//! drift of the host. A program's work above the floor is the median over the rounds of
//! its real time per iteration less the median of its empty time; the sum over the
//! programs is forkprof's own work. Each round's own difference (all real programs less
//! all empty ones) is listed too: how far they spread is the measurement's noise.
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Result;

use super::bpf_stats::{self, ProgStat};
use super::stats::{median, median_ci90};
use super::tools::Paths;

/// The forkprof command whose programs are measured: `run` follows the loop alone; `record`
/// and `monitor` trace the whole system (trace-all), started before the loop and stopped
/// after it, as their rows in the pairs are.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum FloorMode {
    #[default]
    Run,
    Record,
    Monitor,
}

impl FloorMode {
    pub(super) fn name(self) -> &'static str {
        match self {
            FloorMode::Run => "run",
            FloorMode::Record => "record",
            FloorMode::Monitor => "monitor",
        }
    }
}

/// A forkprof binary to measure, and its name in the table.
pub(super) struct Build {
    pub(super) label: String,
    pub(super) forkprof: PathBuf,
}

/// One build's runs: per round, the real programs' statistics and the empty ones'.
pub(super) struct Rounds {
    pub(super) label: String,
    pub(super) real: Vec<Vec<ProgStat>>,
    pub(super) empty: Vec<Vec<ProgStat>>,
    /// Per round, the share of the CPU time this VM wanted over its two runs that the host
    /// took (/proc/stat steal), where it could be read.
    pub(super) stolen: Vec<Option<f64>>,
}

/// Runs `rounds` rounds; in each, every build's real run and then its empty run.
pub(super) fn measure(
    paths: &Paths,
    mode: FloorMode,
    iterations: u32,
    rounds: u32,
    builds: &[Build],
) -> Result<Vec<Rounds>> {
    let mut out: Vec<Rounds> = builds
        .iter()
        .map(|b| Rounds {
            label: b.label.clone(),
            real: Vec::new(),
            empty: Vec::new(),
            stolen: Vec::new(),
        })
        .collect();
    for round in 1..=rounds {
        eprintln!("xtask: bench: above the floor, round {round}/{rounds}");
        for (build, rounds) in builds.iter().zip(&mut out) {
            let before = super::background::ticks_now();
            rounds.real.push(bpf_stats::measure_with(
                paths,
                &build.forkprof,
                mode,
                false,
                iterations,
            )?);
            rounds.empty.push(bpf_stats::measure_with(
                paths,
                &build.forkprof,
                mode,
                true,
                iterations,
            )?);
            rounds
                .stolen
                .push(super::background::ticks_now().stolen_since(&before));
        }
    }
    Ok(out)
}

/// One program's medians, in µs (or hits) per iteration.
#[derive(Debug, PartialEq)]
pub(super) struct ProgramFloor {
    pub(super) program: String,
    pub(super) hits_per_iter: f64,
    pub(super) real_us: f64,
    pub(super) empty_us: f64,
    pub(super) above_us: f64,
}

/// One build's result.
#[derive(Debug, PartialEq)]
pub(super) struct Summary {
    pub(super) build: String,
    /// By work above the floor, largest first.
    pub(super) programs: Vec<ProgramFloor>,
    /// The sum of the programs' `above_us`: forkprof's own work per iteration.
    pub(super) above_us: f64,
    /// Each round's total of real programs less its total of empty ones, in round order.
    pub(super) round_above_us: Vec<f64>,
    /// Each round's share of the CPU time wanted that the host took, in round order.
    pub(super) round_stolen: Vec<Option<f64>>,
}

/// `value` summed over the programs of one run that `name` picks (all of them for `None`),
/// per iteration of the loop; 0 when none ran.
fn per_iter(
    stats: &[ProgStat],
    name: Option<&str>,
    value: fn(&ProgStat) -> u64,
    iterations: u32,
) -> f64 {
    stats
        .iter()
        .filter(|p| name.is_none_or(|n| p.name == n))
        .map(|p| value(p) as f64)
        .sum::<f64>()
        / f64::from(iterations)
}

/// Microseconds per iteration of the programs that `name` picks in one run.
fn us(stats: &[ProgStat], name: Option<&str>, iterations: u32) -> f64 {
    per_iter(stats, name, |p| p.run_ns, iterations) / 1000.0
}

/// The per-program medians and the rounds' totals of one build.
pub(super) fn summarise(rounds: &Rounds, iterations: u32) -> Summary {
    let mut names: Vec<&str> = rounds
        .real
        .iter()
        .chain(&rounds.empty)
        .flatten()
        .map(|p| p.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut programs: Vec<ProgramFloor> = names
        .into_iter()
        .map(|name| {
            let per_round = |runs: &[Vec<ProgStat>]| -> Vec<f64> {
                runs.iter().map(|r| us(r, Some(name), iterations)).collect()
            };
            let hits: Vec<f64> = rounds
                .real
                .iter()
                .map(|r| per_iter(r, Some(name), |p| p.runs, iterations))
                .collect();
            let real_us = median(&per_round(&rounds.real)).unwrap_or(0.0);
            let empty_us = median(&per_round(&rounds.empty)).unwrap_or(0.0);
            ProgramFloor {
                program: name.to_owned(),
                hits_per_iter: median(&hits).unwrap_or(0.0),
                real_us,
                empty_us,
                above_us: real_us - empty_us,
            }
        })
        .collect();
    programs.sort_by(|a, b| b.above_us.total_cmp(&a.above_us));
    Summary {
        build: rounds.label.clone(),
        above_us: programs.iter().map(|p| p.above_us).sum(),
        round_above_us: rounds
            .real
            .iter()
            .zip(&rounds.empty)
            .map(|(r, e)| us(r, None, iterations) - us(e, None, iterations))
            .collect(),
        round_stolen: rounds.stolen.clone(),
        programs,
    }
}

/// Each round's share of the CPU time wanted that the host took, as a line; None where
/// none could be read.
fn stolen_line(stolen: &[Option<f64>]) -> Option<String> {
    if stolen.iter().all(Option::is_none) {
        return None;
    }
    let each: Vec<String> = stolen
        .iter()
        .map(|s| s.map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", s * 100.0)))
        .collect();
    let most = stolen.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
    let warning = if most > STOLEN_WARN {
        " (the host was busy: the programs' times, real and empty, move with it)"
    } else {
        ""
    };
    Some(format!(
        "each round, the CPU time wanted that the host took (steal): {}{warning}",
        each.join(", ")
    ))
}

/// A round whose steal is above this share is flagged.
const STOLEN_WARN: f64 = 0.05;

/// Each round's work above the floor of `this` less that of `other`. The two builds ran in
/// the same round, one right after the other, so each difference shares the host's drift of
/// that moment: their median and its interval say whether a difference is more than noise.
pub(super) fn paired(this: &Summary, other: &Summary) -> Vec<f64> {
    this.round_above_us
        .iter()
        .zip(&other.round_above_us)
        .map(|(a, b)| a - b)
        .collect()
}

/// The text tables, one per build, and the difference of the first build from the others.
pub(super) fn table(summaries: &[Summary], mode: FloorMode, iterations: u32) -> String {
    let mut out = String::new();
    let rounds = summaries.first().map_or(0, |s| s.round_above_us.len());
    let _ = writeln!(
        out,
        "\nforkprof's own work above its hooks' floor, under forkprof {}: {rounds} rounds of \
         {iterations} iterations, real and empty programs (FORKPROF_BENCH_EMPTY=1) \
         alternating, kernel.bpf_stats_enabled=1; medians in us per iteration",
        mode.name()
    );
    for s in summaries {
        let width = bpf_stats::name_width(s.programs.iter().map(|p| p.program.as_str()));
        let _ = writeln!(out, "\n{}:\n", s.build);
        let _ = writeln!(
            out,
            "{:<width$}  {:>9}  {:>7}  {:>7}  {:>7}",
            "program", "hits/iter", "real", "empty", "above"
        );
        let _ = writeln!(out, "{}", "-".repeat(width + 38));
        for p in &s.programs {
            let _ = writeln!(
                out,
                "{:<width$}  {:>9.1}  {:>7.2}  {:>7.2}  {:>7.2}",
                p.program, p.hits_per_iter, p.real_us, p.empty_us, p.above_us
            );
        }
        let real: f64 = s.programs.iter().map(|p| p.real_us).sum();
        let empty: f64 = s.programs.iter().map(|p| p.empty_us).sum();
        let _ = writeln!(
            out,
            "{:<width$}  {:>9}  {:>7.2}  {:>7.2}  {:>7.2}",
            "total", "", real, empty, s.above_us
        );
        let each: Vec<String> = s.round_above_us.iter().map(|v| format!("{v:.2}")).collect();
        let _ = writeln!(
            out,
            "each round, all real less all empty: {} (median {})",
            each.join(", "),
            median(&s.round_above_us).map_or_else(|| "-".to_owned(), |m| format!("{m:.2}"))
        );
        if let Some(line) = stolen_line(&s.round_stolen) {
            let _ = writeln!(out, "{line}");
        }
    }
    if let [this, others @ ..] = summaries {
        for other in others {
            let _ = writeln!(
                out,
                "\n{} less {}: {:+.2} us per iteration above the floor (sums of medians)",
                this.build,
                other.build,
                this.above_us - other.above_us
            );
            let diffs = paired(this, other);
            let interval = median_ci90(&diffs).map_or_else(
                || "no interval under 5 rounds".to_owned(),
                |(lo, hi)| format!("90% CI {lo:+.2} .. {hi:+.2}"),
            );
            let _ = writeln!(
                out,
                "the same, round by round (each round ran both): median {}, {interval}",
                median(&diffs).map_or_else(|| "-".to_owned(), |m| format!("{m:+.2}")),
            );
        }
    }
    let _ = writeln!(
        out,
        "bpf_stats adds two clock reads to every hit, in real and empty runs alike"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(name: &str, run_ns: u64, runs: u64) -> ProgStat {
        ProgStat {
            name: name.to_owned(),
            run_ns,
            runs,
        }
    }

    fn rounds() -> Rounds {
        // 1000 iterations: 1000 ns in all is 1 ns per iteration, 0.001 us.
        Rounds {
            label: "this build".to_owned(),
            real: vec![
                vec![stat("a", 3_000_000, 2000), stat("b", 1_000_000, 1000)],
                vec![stat("a", 5_000_000, 2000), stat("b", 1_200_000, 1000)],
                vec![stat("a", 4_000_000, 2000), stat("b", 900_000, 1000)],
            ],
            empty: vec![
                vec![stat("a", 1_000_000, 2000), stat("b", 100_000, 1000)],
                vec![stat("a", 2_000_000, 2000), stat("b", 100_000, 1000)],
                vec![stat("a", 1_500_000, 2000), stat("b", 200_000, 1000)],
            ],
            stolen: vec![Some(0.02), None, Some(0.3)],
        }
    }

    #[test]
    fn medians_per_program_and_totals_per_round() {
        let s = summarise(&rounds(), 1000);
        assert_eq!(s.programs.len(), 2);
        // a: real median 4.0, empty median 1.5; b: real 1.0, empty 0.1
        assert_eq!(s.programs[0].program, "a");
        assert!((s.programs[0].real_us - 4.0).abs() < 1e-9);
        assert!((s.programs[0].empty_us - 1.5).abs() < 1e-9);
        assert!((s.programs[0].above_us - 2.5).abs() < 1e-9);
        assert!((s.programs[0].hits_per_iter - 2.0).abs() < 1e-9);
        assert!((s.programs[1].above_us - 0.9).abs() < 1e-9);
        assert!((s.above_us - 3.4).abs() < 1e-9);
        let expected = [4.0 - 1.1, 6.2 - 2.1, 4.9 - 1.7];
        for (got, want) in s.round_above_us.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{got} != {want}");
        }
        // Each round's steal, flagged where the host took more than 5%.
        let text = table(&[s], FloorMode::Run, 1000);
        assert!(
            text.contains(
                "each round, the CPU time wanted that the host took (steal): 2%, -, 30% (the host \
                 was busy: the programs' times, real and empty, move with it)\n"
            ),
            "{text}"
        );
        assert_eq!(
            stolen_line(&[Some(0.01), Some(0.05)]).unwrap(),
            "each round, the CPU time wanted that the host took (steal): 1%, 5%"
        );
        assert_eq!(stolen_line(&[None, None]), None);
    }

    #[test]
    fn a_program_missing_from_a_run_counts_as_zero_there() {
        let mut r = rounds();
        r.empty[0].retain(|p| p.name != "b");
        let s = summarise(&r, 1000);
        let b = s.programs.iter().find(|p| p.program == "b").unwrap();
        // empty b: 0.0, 0.1, 0.2 -> median 0.1
        assert!((b.empty_us - 0.1).abs() < 1e-9);
    }

    fn summary(label: &str, round_above_us: Vec<f64>) -> Summary {
        Summary {
            build: label.to_owned(),
            programs: Vec::new(),
            above_us: 0.0,
            round_stolen: vec![None; round_above_us.len()],
            round_above_us,
        }
    }

    #[test]
    fn builds_are_compared_round_by_round_with_an_interval_from_five_rounds() {
        let this = summary("this", vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let before = summary("before", vec![1.0, 1.0, 1.0, 1.0, 1.0, 9.0]);
        assert_eq!(paired(&this, &before), [2.0, 3.0, 4.0, 5.0, 6.0, -1.0]);
        let text = table(&[this, before], FloorMode::Run, 1000);
        // Six values: the median of -1, 2, 3, 4, 5, 6 is 3.5; the 90% interval is [min, max].
        assert!(
            text.contains("median +3.50, 90% CI -1.00 .. +6.00\n"),
            "{text}"
        );
        let short = table(
            &[
                summary("this", vec![1.0; 4]),
                summary("before", vec![0.5; 4]),
            ],
            FloorMode::Run,
            1000,
        );
        assert!(
            short.contains("median +0.50, no interval under 5 rounds\n"),
            "{short}"
        );
    }

    #[test]
    fn table_shows_each_build_and_the_difference() {
        let this = summarise(&rounds(), 1000);
        let mut before = rounds();
        before.label = "before (old/forkprof)".to_owned();
        before.real[0][0].run_ns = 3_500_000;
        before.real[1][0].run_ns = 5_500_000;
        before.real[2][0].run_ns = 4_500_000;
        let before = summarise(&before, 1000);
        let text = table(&[this, before], FloorMode::Run, 1000);
        let expected = "\n\
forkprof's own work above its hooks' floor, under forkprof run: 3 rounds of 1000 iterations, real and empty programs (FORKPROF_BENCH_EMPTY=1) alternating, kernel.bpf_stats_enabled=1; medians in us per iteration\n\
\n\
this build:\n\
\n\
program  hits/iter     real    empty    above\n\
---------------------------------------------\n\
a              2.0     4.00     1.50     2.50\n\
b              1.0     1.00     0.10     0.90\n\
total                  5.00     1.60     3.40\n\
each round, all real less all empty: 2.90, 4.10, 3.20 (median 3.20)\n\
each round, the CPU time wanted that the host took (steal): 2%, -, 30% (the host was busy: the programs' times, real and empty, move with it)\n\
\n\
before (old/forkprof):\n\
\n\
program  hits/iter     real    empty    above\n\
---------------------------------------------\n\
a              2.0     4.50     1.50     3.00\n\
b              1.0     1.00     0.10     0.90\n\
total                  5.50     1.60     3.90\n\
each round, all real less all empty: 3.40, 4.60, 3.70 (median 3.70)\n\
each round, the CPU time wanted that the host took (steal): 2%, -, 30% (the host was busy: the programs' times, real and empty, move with it)\n\
\n\
this build less before (old/forkprof): -0.50 us per iteration above the floor (sums of medians)\n\
the same, round by round (each round ran both): median -0.50, no interval under 5 rounds\n\
bpf_stats adds two clock reads to every hit, in real and empty runs alike\n\
";
        assert_eq!(text, expected);
    }
}
