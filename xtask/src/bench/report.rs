//! The results on stdout: the text table (or the JSON), the machine, forkprof's own counts.
use std::fmt::Write as _;
use std::fs;
use std::process::Command;
use std::thread;

use anyhow::Result;
use serde::Serialize;

use super::BenchArgs;
use super::ablation::{self, Family};
use super::bpf_stats::{self, ProgStat};
use super::floor::{self, Summary};
use super::gap;
use super::json;
use super::measure::Row;
use super::stats::{max, median, median_ci90, min, pct};
use super::tools::Paths;

#[derive(Serialize)]
pub(super) struct Machine {
    nproc: usize,
    cpu: String,
    kernel: String,
}

impl Machine {
    fn probe() -> Self {
        let cpu = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            nproc: thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: crate::output(Command::new("uname").arg("-r"))
                .trim()
                .to_owned(),
            cpu,
        }
    }
}

/// Prints the results on stdout: the JSON document, or the table (and the --bpf-stats one).
pub(super) fn print(
    args: &BenchArgs,
    rows: &[Row],
    check: Option<&str>,
    stats: Option<&[ProgStat]>,
    families: Option<&[Family]>,
    floor: Option<&[Summary]>,
) -> Result<()> {
    let machine = Machine::probe();
    if args.json {
        println!(
            "{}",
            json::json(args, &machine, rows, check, stats, families, floor)?
        );
    } else {
        print!("{}", table(args, &machine, rows, check));
        if let Some(stats) = stats {
            let bare_median = median(&rows[0].us());
            print!(
                "{}",
                bpf_stats::table(stats, args.iterations(), bare_median)
            );
        }
        if let Some(families) = families {
            print!("{}", ablation::table(families));
        }
        if let Some(floor) = floor {
            print!(
                "{}",
                floor::table(floor, args.floor_mode, args.iterations())
            );
        }
    }
    Ok(())
}

/// A line on what forkprof saw in its last run, from its JSON report: it must have
/// traced every process and lost nothing, or its overhead is not comparable.
pub(super) fn forkprof_check(paths: &Paths) -> Option<String> {
    let text = fs::read_to_string(paths.dir.join("forkprof-report.json")).ok()?;
    forkprof_saw(&text)
}

/// The counts of a forkprof JSON report's `summary`, as forkprof_check's line.
fn forkprof_saw(report: &str) -> Option<String> {
    let report: serde_json::Value = serde_json::from_str(report).ok()?;
    let count = |key: &str| report.get("summary")?.get(key)?.as_u64();
    let (processes, execs, lost) = (count("processes")?, count("execs")?, count("lost_events")?);
    Some(format!(
        "forkprof's last run saw {processes} processes, {execs} execs, {lost} lost events"
    ))
}

/// One line of the table per row, header first, and the notes to print under it.
fn cells(rows: &[Row], max_background: f64) -> (Vec<[String; 13]>, Vec<String>) {
    let header = [
        "run",
        "median us/iter",
        "min",
        "max",
        "overhead vs bare",
        "90% CI",
        "CPU overhead",
        "CPU 90% CI",
        "tracer CPU us/iter",
        "total CPU overhead",
        "total CPU 90% CI",
        "background CPUs",
        "stolen",
    ];
    let mut cells = vec![header.map(str::to_owned)];
    let mut notes = Vec::new();
    for row in rows {
        if let Some(why) = &row.unavailable
            && row.samples.is_empty()
        {
            cells.push(
                [
                    row.label, "n/a", "-", "-", "n/a", "-", "n/a", "-", "n/a", "n/a", "-", "-", "-",
                ]
                .map(str::to_owned),
            );
            notes.push(format!("{}: not run: {why}", row.label));
            continue;
        }
        if let Some(why) = &row.unavailable {
            notes.push(format!("{}: stopped early: {why}", row.label));
        }
        if row.noisy_pairs > 0 {
            notes.push(format!(
                "{}: {} of {} pairs kept with more than {max_background} CPUs busy elsewhere",
                row.label,
                row.noisy_pairs,
                row.samples.len(),
            ));
        }
        cells.push(measured_cells(row));
    }
    (cells, notes)
}

/// The table line of a row that has samples.
fn measured_cells(row: &Row) -> [String; 13] {
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    let two_places = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    let values = row.us();
    let of = |ratios: &Option<Vec<f64>>| match ratios {
        None => ("-".to_owned(), "-".to_owned()),
        Some(r) => (
            median(r).map_or_else(|| "-".to_owned(), pct),
            median_ci90(r).map_or_else(
                || "-".to_owned(),
                |(lo, hi)| format!("{} .. {}", pct(lo), pct(hi)),
            ),
        ),
    };
    let (overhead, range) = of(&row.ratios);
    let (cpu_overhead, cpu_range) = of(&row.cpu_ratios);
    let (total_overhead, total_range) = of(&row.total_cpu_ratios);
    let tracer = row.tracer_cpu_us();
    [
        row.label.to_owned(),
        us(median(&values)),
        us(min(&values)),
        us(max(&values)),
        overhead,
        range,
        cpu_overhead,
        cpu_range,
        two_places(median(&tracer)),
        total_overhead,
        total_range,
        two_places(median(&row.background())),
        median(&row.stolen()).map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", s * 100.0)),
    ]
}

/// `cells` in aligned columns (the first left-aligned, the others right-aligned), with a
/// rule under the header.
pub(super) fn write_columns<const N: usize>(out: &mut String, cells: &[[String; N]]) {
    let mut widths = [0usize; N];
    for c in cells {
        for (w, s) in widths.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    for (n, c) in cells.iter().enumerate() {
        let mut line = format!("{:<w$}", c[0], w = widths[0]);
        for (s, w) in c.iter().zip(widths).skip(1) {
            let _ = write!(line, "  {s:>w$}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
        if n == 0 {
            let total = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
}

/// The text report: what was run, on what, the table, and the notes under it.
fn table(args: &BenchArgs, machine: &Machine, rows: &[Row], check: Option<&str>) -> String {
    let (cells, notes) = cells(rows, args.max_background);
    let mut out = format!(
        "{}: {} iterations per run, {} alternating pairs per tool{}\n",
        args.workload.describe(),
        args.iterations(),
        args.pairs,
        if args.pin {
            "; the loop pinned to CPU 0, forkprof to CPU 1 (--pin)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "machine: {} CPUs ({}), kernel {}\n",
        machine.nproc, machine.cpu, machine.kernel
    );
    write_columns(&mut out, &cells);
    out.push_str(
        "\noverhead vs bare: median over pairs of (tool run / the bare run just before it) - 1\n\
         90% CI: of that median (order statistics; none under 5 pairs); A/A shows the noise floor\n\
         CPU overhead: the same by the loop's CPU time (getrusage: the loop and its children, eBPF included)\n\
         tracer CPU: median CPU time of the tracer's own process (all its threads) over the loop: forkprof's agent, strace, perf, bpftrace\n\
         total CPU overhead: by the CPU time of the loop and the tracer together, against the bare loop's: what tracing costs the machine\n\
         background CPUs: median over runs of the CPUs other processes kept busy during a run (the host's steal included)\n\
         stolen: median over runs of the share of the CPU time this VM wanted that its host took (/proc/stat steal): above a few %, the host is busy and every figure moves with it\n",
    );
    for line in check.into_iter().map(str::to_owned).chain(notes) {
        let _ = writeln!(out, "{line}");
    }
    let gaps = gap::lines(&gap::floor_gaps(rows));
    if !gaps.is_empty() {
        let _ = write!(out, "\n{gaps}");
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::bench::measure::Sample;

    pub(in crate::bench) fn args() -> BenchArgs {
        BenchArgs {
            iterations: None,
            workload: crate::bench::tools::Workload::ForkExec,
            pairs: 2,
            only: Vec::new(),
            ablation: false,
            above_floor: None,
            before: None,
            pin: false,
            floor_mode: floor::FloorMode::Run,
            max_background: 0.25,
            retries: 1,
            bpf_stats: false,
            json: true,
            no_build: true,
            no_install: true,
        }
    }

    pub(in crate::bench) fn machine() -> Machine {
        Machine {
            nproc: 2,
            cpu: "A \"quoted\"\tCPU\n".to_owned(),
            kernel: "6.12.0".to_owned(),
        }
    }

    /// A bare row, a tool measured in two pairs (one noisy), and a tool that did not run.
    pub(in crate::bench) fn rows() -> Vec<Row> {
        let sample = |us, background, tracer| Sample {
            us,
            cpu_us: Some(us * 0.98),
            tracer_cpu_us: tracer,
            background,
            stolen: Some(0.04),
        };
        let mut bare = Row::new("bare", false);
        bare.samples = vec![sample(1000.0, 0.1, None), sample(1001.5, 0.3, None)];
        let mut tool = Row::new("forkprof run", true);
        tool.samples = vec![
            sample(1100.0, 0.05, Some(9.5)),
            sample(1201.8, 0.2, Some(10.25)),
        ];
        tool.ratios = Some(vec![1.1, 1.2]);
        tool.cpu_ratios = Some(vec![1.08, 1.16]);
        tool.total_cpu_ratios = Some(vec![1.09, 1.17]);
        tool.noisy_pairs = 1;
        let mut missing = Row::new("strace -f -c", true);
        missing.unavailable = Some("package strace could not be installed".to_owned());
        vec![bare, tool, missing]
    }

    #[test]
    fn table_layout() {
        let mut args = args();
        args.json = false;
        let text = table(
            &args,
            &machine(),
            &rows(),
            Some("forkprof's last run saw 3 processes"),
        );
        let expected = "\
fork+exec+wait of a dynamically linked `int main(){return 0;}`: 2000 iterations per run, 2 alternating pairs per tool
machine: 2 CPUs (A \"quoted\"\tCPU\n), kernel 6.12.0

run           median us/iter     min     max  overhead vs bare  90% CI  CPU overhead  CPU 90% CI  tracer CPU us/iter  total CPU overhead  total CPU 90% CI  background CPUs  stolen
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
bare                  1000.8  1000.0  1001.5                 -       -             -           -                   -                   -                 -             0.20      4%
forkprof run          1150.9  1100.0  1201.8            +15.0%       -        +12.0%           -                9.88              +13.0%                 -             0.12      4%
strace -f -c             n/a       -       -               n/a       -           n/a           -                 n/a                 n/a                 -                -       -

overhead vs bare: median over pairs of (tool run / the bare run just before it) - 1
90% CI: of that median (order statistics; none under 5 pairs); A/A shows the noise floor
CPU overhead: the same by the loop's CPU time (getrusage: the loop and its children, eBPF included)
tracer CPU: median CPU time of the tracer's own process (all its threads) over the loop: forkprof's agent, strace, perf, bpftrace
total CPU overhead: by the CPU time of the loop and the tracer together, against the bare loop's: what tracing costs the machine
background CPUs: median over runs of the CPUs other processes kept busy during a run (the host's steal included)
stolen: median over runs of the share of the CPU time this VM wanted that its host took (/proc/stat steal): above a few %, the host is busy and every figure moves with it
forkprof's last run saw 3 processes
forkprof run: 1 of 2 pairs kept with more than 0.25 CPUs busy elsewhere
strace -f -c: not run: package strace could not be installed
";
        assert_eq!(text, expected);
    }

    #[test]
    fn reads_forkprof_summary() {
        let text = r#"{"command":["processes"],"summary":{"processes":2001,"execs":2001,
                       "lost_events":0},"processes":[{"pid":1}]}"#;
        assert_eq!(
            forkprof_saw(text).as_deref(),
            Some("forkprof's last run saw 2001 processes, 2001 execs, 0 lost events")
        );
        assert_eq!(forkprof_saw(r#"{"summary":{"processes":7}}"#), None);
        assert_eq!(
            forkprof_saw(r#"{"processes":7,"execs":7,"lost_events":0}"#),
            None
        );
        assert_eq!(forkprof_saw("not json"), None);
    }
}
