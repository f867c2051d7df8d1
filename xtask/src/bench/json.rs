//! The `--json` document, with the keys, order and three-decimal numbers it has always had.
use anyhow::Result;
use serde::{Serialize, Serializer};

use super::BenchArgs;
use super::ablation::Family;
use super::bpf_stats::ProgStat;
use super::floor::Summary;
use super::gap::{FloorGap, floor_gaps};
use super::measure::Row;
use super::report::Machine;
use super::stats::{max, median, median_ci90, min};

/// A number written rounded to three decimals, as the JSON has always had them.
#[derive(Clone, Copy)]
struct Dec3(f64);

impl Serialize for Dec3 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // the decimal `{:.3}` writes, so that no digit beyond it sneaks in
        let rounded = format!("{:.3}", self.0).parse().unwrap_or(self.0);
        s.serialize_f64(rounded)
    }
}

fn dec3(values: &[f64]) -> Vec<Dec3> {
    values.iter().copied().map(Dec3).collect()
}

/// The JSON document (`--json`).
#[derive(Serialize)]
struct JsonReport<'a> {
    workload: super::tools::Workload,
    iterations: u32,
    pairs: u32,
    max_background: f64,
    /// `--pin`: the loop on CPU 0, forkprof on CPU 1.
    pinned: bool,
    machine: &'a Machine,
    forkprof_check: Option<&'a str>,
    runs: Vec<JsonRun<'a>>,
    bpf_stats: Option<&'a [ProgStat]>,
    ablation: Option<Vec<JsonFamily<'a>>>,
    /// The forkprof command `above_floor` measured (`--floor-mode`), with it.
    above_floor_mode: Option<super::floor::FloorMode>,
    above_floor: Option<Vec<JsonFloor<'a>>>,
    /// Each forkprof run against its empty programs' run, round by round (`gap`).
    overhead_above_floor: Vec<JsonGap>,
}

/// One row less its floor's row, in percentage points.
#[derive(Serialize)]
struct JsonGap {
    run: &'static str,
    floor: &'static str,
    rounds: usize,
    points: Option<Dec3>,
    ci90_points: Option<[Dec3; 2]>,
    cpu_points: Option<Dec3>,
    cpu_ci90_points: Option<[Dec3; 2]>,
    round_points: Vec<Dec3>,
}

impl JsonGap {
    fn new(g: &FloorGap) -> Self {
        let ci = |v: &[f64]| median_ci90(v).map(|(lo, hi)| [Dec3(lo), Dec3(hi)]);
        JsonGap {
            run: g.run,
            floor: g.floor,
            rounds: g.points.len(),
            points: median(&g.points).map(Dec3),
            ci90_points: ci(&g.points),
            cpu_points: median(&g.cpu_points).map(Dec3),
            cpu_ci90_points: ci(&g.cpu_points),
            round_points: dec3(&g.points),
        }
    }
}

/// One build of `--above-floor`, in µs (and hits) per iteration.
#[derive(Serialize)]
struct JsonFloor<'a> {
    build: &'a str,
    above_us: Dec3,
    round_above_us: Vec<Dec3>,
    /// Per round, the share of the CPU time wanted that the host took (null: unread).
    round_stolen_share: Vec<Option<Dec3>>,
    programs: Vec<JsonProgramFloor<'a>>,
}

#[derive(Serialize)]
struct JsonProgramFloor<'a> {
    program: &'a str,
    hits_per_iter: Dec3,
    real_us: Dec3,
    empty_us: Dec3,
    above_us: Dec3,
}

impl<'a> JsonFloor<'a> {
    fn new(s: &'a Summary) -> Self {
        JsonFloor {
            build: &s.build,
            above_us: Dec3(s.above_us),
            round_above_us: dec3(&s.round_above_us),
            round_stolen_share: s.round_stolen.iter().map(|s| s.map(Dec3)).collect(),
            programs: s
                .programs
                .iter()
                .map(|p| JsonProgramFloor {
                    program: &p.program,
                    hits_per_iter: Dec3(p.hits_per_iter),
                    real_us: Dec3(p.real_us),
                    empty_us: Dec3(p.empty_us),
                    above_us: Dec3(p.above_us),
                })
                .collect(),
        }
    }
}

/// One hook family of `--ablation`.
#[derive(Serialize)]
struct JsonFamily<'a> {
    family: &'a str,
    hits_per_iter: Option<Dec3>,
    us_per_iter: Option<Dec3>,
    empty: JsonRun<'a>,
    real: JsonRun<'a>,
}

/// One row of the table in the JSON document; percentages are overheads, ratios are not.
#[derive(Serialize)]
struct JsonRun<'a> {
    run: &'a str,
    available: bool,
    reason: Option<&'a str>,
    median_us: Option<Dec3>,
    min_us: Option<Dec3>,
    max_us: Option<Dec3>,
    overhead_pct: Option<Dec3>,
    overhead_ci90_pct: Option<[Dec3; 2]>,
    cpu_overhead_pct: Option<Dec3>,
    cpu_overhead_ci90_pct: Option<[Dec3; 2]>,
    tracer_cpu_us: Option<Dec3>,
    total_cpu_overhead_pct: Option<Dec3>,
    total_cpu_overhead_ci90_pct: Option<[Dec3; 2]>,
    samples_us: Vec<Dec3>,
    cpu_samples_us: Vec<Dec3>,
    tracer_cpu_samples_us: Vec<Dec3>,
    ratios: Option<Vec<Dec3>>,
    background_cpus: Vec<Dec3>,
    stolen_share: Vec<Dec3>,
    noisy_pairs: usize,
}

impl<'a> JsonRun<'a> {
    fn new(row: &'a Row) -> Self {
        let pct = |r: f64| Dec3((r - 1.0) * 100.0);
        let us = row.us();
        let ratios = row.ratios.as_deref();
        let cpu_ratios = row.cpu_ratios.as_deref();
        let total_cpu_ratios = row.total_cpu_ratios.as_deref();
        let tracer = row.tracer_cpu_us();
        JsonRun {
            run: row.label,
            available: row.unavailable.is_none(),
            reason: row.unavailable.as_deref(),
            median_us: median(&us).map(Dec3),
            min_us: min(&us).map(Dec3),
            max_us: max(&us).map(Dec3),
            overhead_pct: ratios.and_then(median).map(pct),
            overhead_ci90_pct: ratios
                .and_then(median_ci90)
                .map(|(lo, hi)| [pct(lo), pct(hi)]),
            cpu_overhead_pct: cpu_ratios.and_then(median).map(pct),
            cpu_overhead_ci90_pct: cpu_ratios
                .and_then(median_ci90)
                .map(|(lo, hi)| [pct(lo), pct(hi)]),
            tracer_cpu_us: median(&tracer).map(Dec3),
            total_cpu_overhead_pct: total_cpu_ratios.and_then(median).map(pct),
            total_cpu_overhead_ci90_pct: total_cpu_ratios
                .and_then(median_ci90)
                .map(|(lo, hi)| [pct(lo), pct(hi)]),
            samples_us: dec3(&us),
            cpu_samples_us: dec3(&row.cpu_us()),
            tracer_cpu_samples_us: dec3(&tracer),
            ratios: ratios.map(dec3),
            background_cpus: dec3(&row.background()),
            stolen_share: dec3(&row.stolen()),
            noisy_pairs: row.noisy_pairs,
        }
    }
}

/// The results as one JSON document, on one line.
pub(super) fn json(
    args: &BenchArgs,
    machine: &Machine,
    rows: &[Row],
    check: Option<&str>,
    stats: Option<&[ProgStat]>,
    families: Option<&[Family]>,
    floor: Option<&[Summary]>,
) -> Result<String> {
    Ok(serde_json::to_string(&JsonReport {
        workload: args.workload,
        iterations: args.iterations(),
        pairs: args.pairs,
        max_background: args.max_background,
        pinned: args.pin,
        machine,
        forkprof_check: check,
        runs: rows.iter().map(JsonRun::new).collect(),
        bpf_stats: stats,
        ablation: families.map(|fs| {
            fs.iter()
                .map(|f| JsonFamily {
                    family: f.name,
                    hits_per_iter: f.hits_per_iter.map(Dec3),
                    us_per_iter: f.us_per_iter.map(Dec3),
                    empty: JsonRun::new(&f.empty),
                    real: JsonRun::new(&f.real),
                })
                .collect()
        }),
        above_floor_mode: floor.map(|_| args.floor_mode),
        above_floor: floor.map(|fs| fs.iter().map(JsonFloor::new).collect()),
        overhead_above_floor: floor_gaps(rows).iter().map(JsonGap::new).collect(),
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::measure::Sample;
    use crate::bench::report::tests::{args, machine, rows};

    #[test]
    fn json_has_the_documented_keys_in_order() {
        let stats = [ProgStat {
            name: "forkprof_sys_enter".to_owned(),
            run_ns: 1_005_879,
            runs: 3565,
        }];
        let floor = [Summary {
            build: "this build".to_owned(),
            programs: vec![crate::bench::floor::ProgramFloor {
                program: "forkprof_sys_enter".to_owned(),
                hits_per_iter: 33.8,
                real_us: 3.6612,
                empty_us: 1.83,
                above_us: 1.8312,
            }],
            above_us: 1.8312,
            round_above_us: vec![1.5, 2.25],
            round_stolen: vec![Some(0.125), None],
        }];
        let text = json(
            &args(),
            &machine(),
            &rows(),
            Some("saw"),
            Some(&stats),
            None,
            Some(&floor),
        )
        .unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"workload":"fork-exec","iterations":2000,"pairs":2,"max_background":0.25,"pinned":false,"#,
                r#""machine":{"nproc":2,"cpu":"A \"quoted\"\tCPU\n","kernel":"6.12.0"},"#,
                r#""forkprof_check":"saw","runs":["#,
                r#"{"run":"bare","available":true,"reason":null,"median_us":1000.75,"#,
                r#""min_us":1000.0,"max_us":1001.5,"overhead_pct":null,"overhead_ci90_pct":null,"#,
                r#""cpu_overhead_pct":null,"cpu_overhead_ci90_pct":null,"#,
                r#""tracer_cpu_us":null,"total_cpu_overhead_pct":null,"#,
                r#""total_cpu_overhead_ci90_pct":null,"#,
                r#""samples_us":[1000.0,1001.5],"cpu_samples_us":[980.0,981.47],"#,
                r#""tracer_cpu_samples_us":[],"ratios":null,"background_cpus":[0.1,0.3],"stolen_share":[0.04,0.04],"#,
                r#""noisy_pairs":0},"#,
                r#"{"run":"forkprof run","available":true,"reason":null,"median_us":1150.9,"#,
                r#""min_us":1100.0,"max_us":1201.8,"overhead_pct":15.0,"overhead_ci90_pct":null,"#,
                r#""cpu_overhead_pct":12.0,"cpu_overhead_ci90_pct":null,"#,
                r#""tracer_cpu_us":9.875,"total_cpu_overhead_pct":13.0,"#,
                r#""total_cpu_overhead_ci90_pct":null,"#,
                r#""samples_us":[1100.0,1201.8],"cpu_samples_us":[1078.0,1177.764],"#,
                r#""tracer_cpu_samples_us":[9.5,10.25],"ratios":[1.1,1.2],"background_cpus":[0.05,0.2],"stolen_share":[0.04,0.04],"#,
                r#""noisy_pairs":1},"#,
                r#"{"run":"strace -f -c","available":false,"#,
                r#""reason":"package strace could not be installed","median_us":null,"#,
                r#""min_us":null,"max_us":null,"overhead_pct":null,"overhead_ci90_pct":null,"#,
                r#""cpu_overhead_pct":null,"cpu_overhead_ci90_pct":null,"#,
                r#""tracer_cpu_us":null,"total_cpu_overhead_pct":null,"#,
                r#""total_cpu_overhead_ci90_pct":null,"samples_us":[],"cpu_samples_us":[],"#,
                r#""tracer_cpu_samples_us":[],"ratios":[],"background_cpus":[],"stolen_share":[],"noisy_pairs":0}],"#,
                r#""bpf_stats":[{"program":"forkprof_sys_enter","run_ns":1005879,"runs":3565}],"#,
                r#""ablation":null,"above_floor_mode":"run","#,
                r#""above_floor":[{"build":"this build","above_us":1.831,"#,
                r#""round_above_us":[1.5,2.25],"round_stolen_share":[0.125,null],"programs":[{"program":"forkprof_sys_enter","#,
                r#""hits_per_iter":33.8,"real_us":3.661,"empty_us":1.83,"above_us":1.831}]}],"#,
                r#""overhead_above_floor":[]}"#,
            )
        );
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["machine"]["cpu"], "A \"quoted\"\tCPU\n");
    }

    #[test]
    fn json_numbers_have_three_decimals_and_intervals_are_pairs() {
        let mut row = Row::new("forkprof run", true);
        row.samples = vec![Sample {
            us: 1255.57849,
            cpu_us: None,
            tracer_cpu_us: None,
            background: 0.0,
            stolen: None,
        }];
        row.ratios = Some(vec![1.01, 1.02, 1.03, 1.04, 1.05]);
        let text = json(&args(), &machine(), &[row], None, None, None, None).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        let run = &parsed["runs"][0];
        assert_eq!(run["median_us"], 1255.578);
        assert_eq!(run["overhead_pct"], 3.0);
        assert_eq!(run["overhead_ci90_pct"], serde_json::json!([1.0, 5.0]));
        assert_eq!(parsed["forkprof_check"], serde_json::Value::Null);
        assert_eq!(parsed["bpf_stats"], serde_json::Value::Null);
        assert_eq!(parsed["above_floor"], serde_json::Value::Null);
    }
}
