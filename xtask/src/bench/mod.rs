//! `cargo xtask bench`: forkprof's overhead on a fork+exec loop, side by side with peers.
//!
//! The workload is `bench/spawn_loop.c`: fork + execl of a dynamically linked
//! `int main(){return 0;}` (`bench/true_dyn.c`) + waitpid, N iterations; or, with
//! `--workload`, the cheapest spawn, or work as users run it (`workload`). The loop times
//! itself with CLOCK_MONOTONIC and prints microseconds per iteration, so a tracer's own
//! start-up and tear-down are not in the number.
//!
//! Every tool (an A/A control that is the bare loop again, forkprof run, strace -f -c,
//! perf trace -s, bench/phases.bt under bpftrace) is run in pairs with a bare run just
//! before it (bare, tool, bare, tool, ...), and its overhead is the median of the per-pair
//! ratios, with a distribution-free 90% interval. Runs get a fixed minimal environment and
//! their own cgroup, so that the load of other processes can be measured and noisy pairs
//! run again. A tool that cannot run here is reported with the reason and left out; the
//! rest of the bench goes on. See BENCHMARKS.md.
mod ablation;
mod background;
mod bpf_stats;
mod floor;
mod gap;
mod json;
mod measure;
mod report;
mod stats;
mod tools;
mod workload;

use anyhow::{Result, bail};

use background::Clock;
use measure::Row;
use tools::{ALL_TOOLS, Paths, Tool, Unavailable, Workload};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Iterations of the workload in each run of the loop [default: 2000 spawns for
    /// fork-exec and vfork-exit, 3 builds for make, 10 scripts for shell].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: Option<u32>,
    /// What each iteration of the loop does.
    #[arg(long, value_enum, default_value_t = Workload::ForkExec)]
    workload: Workload,
    /// Alternating (bare, tool) pairs per tool; overheads are medians of per-pair ratios.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pairs: u32,
    /// Tools to compare with bare runs (comma-separated; default: all of them).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Tool>,
    /// A run during which other processes kept more than this many CPUs busy (on average)
    /// is noisy: its pair is run again, up to --retries times, then kept and flagged.
    #[arg(long, default_value_t = 0.25)]
    max_background: f64,
    /// How many times a noisy pair is run again before it is kept anyway.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=10))]
    retries: u32,
    /// After the pairs, one more forkprof run with kernel.bpf_stats_enabled=1: the time each
    /// of its eBPF programs ran, per hit and per iteration (needs bpftool).
    #[arg(long)]
    bpf_stats: bool,
    /// After the pairs, each of forkprof's hook families alone, with empty and with real
    /// programs, --pairs pairs each (FORKPROF_BENCH_ONLY, FORKPROF_BENCH_EMPTY); implies
    /// --bpf-stats for each family's hits and time.
    #[arg(long)]
    ablation: bool,
    /// After the pairs, this many rounds of forkprof run with kernel.bpf_stats_enabled=1,
    /// real and empty programs (FORKPROF_BENCH_EMPTY=1) alternating: each program's median
    /// time per iteration above its empty twin, which is forkprof's own work above the
    /// floor of its hooks (needs bpftool).
    #[arg(long, value_name = "ROUNDS", value_parser = clap::value_parser!(u32).range(1..=100))]
    above_floor: Option<u32>,
    /// With --above-floor: the forkprof command measured. `run` follows the loop; `record`
    /// and `monitor` trace the whole system (trace-all), started before the loop.
    #[arg(long, value_enum, default_value_t, requires = "above_floor")]
    floor_mode: floor::FloorMode,
    /// With --above-floor: another forkprof binary (an earlier build, say) measured in the
    /// same rounds, right after this one, and compared with it.
    #[arg(long, value_name = "FORKPROF", requires = "above_floor")]
    before: Option<std::path::PathBuf>,
    /// Run the loop, and every process it spawns, on CPU 0, and forkprof (its agent) on CPU 1
    /// (taskset): the loop's CPU time then holds what the programs cost the traced tasks,
    /// without the agent's work beside them or the scheduler moving the loop's processes
    /// between CPUs. Only for the A/A control and the `forkprof run` rows (and the bare runs).
    #[arg(long)]
    pin: bool,
    /// Print the results as one JSON document on stdout (progress stays on stderr).
    #[arg(long)]
    json: bool,
    /// Use target/release/forkprof as it is instead of running `cargo build --release`.
    #[arg(long)]
    no_build: bool,
    /// Do not install missing packages (gcc, strace, linux-perf, bpftrace) with apt-get.
    #[arg(long)]
    no_install: bool,
}

impl BenchArgs {
    /// `--iterations`, or the workload's default.
    fn iterations(&self) -> u32 {
        self.iterations
            .unwrap_or_else(|| self.workload.default_iterations())
    }
}

pub fn run(args: &BenchArgs) -> Result<()> {
    check(args)?;
    let tools = tools_of(args);
    let mut paths = Paths::new(args.workload);
    paths.pin = args.pin;
    let mut unavailable = Unavailable::new();
    prepare(args, &tools, &paths, &mut unavailable)?;
    // Kept until the end of the runs, then removed.
    let _idle = idle_cgroup(&tools, &mut paths, &mut unavailable);
    let clock = Clock::new()?;
    let active = measure::warm_up(&paths, &clock, &tools, args.iterations(), &mut unavailable)?;
    let (bare, rows) = measure::pairs(args, &paths, &clock, &active)?;
    let rows = in_table_order(bare, rows, &tools, &active, &unavailable);
    let forkprof_ran = active.contains(&Tool::Forkprof);
    // Before the ablation, whose runs write the same report with only some hooks.
    let check = forkprof_ran
        .then(|| report::forkprof_check(&paths))
        .flatten();
    let stats = if (args.bpf_stats || args.ablation) && forkprof_ran {
        bpf_stats::measure(&paths, args.iterations())
            .inspect_err(|e| eprintln!("xtask: bench: --bpf-stats: {e:#}"))
            .ok()
    } else {
        None
    };
    let families = if args.ablation && forkprof_ran {
        Some(ablation::measure(args, &clock, stats.as_deref())?)
    } else {
        None
    };
    let floor = match args.above_floor {
        Some(rounds) => {
            let mut builds = vec![floor::Build {
                label: format!("this build ({})", paths.forkprof.display()),
                forkprof: paths.forkprof.clone(),
            }];
            if let Some(before) = &args.before {
                builds.push(floor::Build {
                    label: format!("before ({})", before.display()),
                    forkprof: before.clone(),
                });
            }
            let runs = floor::measure(&paths, args.floor_mode, args.iterations(), rounds, &builds)?;
            Some(
                runs.iter()
                    .map(|r| floor::summarise(r, args.iterations()))
                    .collect::<Vec<_>>(),
            )
        }
        None => None,
    };
    report::print(
        args,
        &rows,
        check.as_deref(),
        stats.as_deref(),
        families.as_deref(),
        floor.as_deref(),
    )
}

/// The tools selected (`--only`, else all), in the table's order.
fn tools_of(args: &BenchArgs) -> Vec<Tool> {
    if args.only.is_empty() {
        ALL_TOOLS.to_vec()
    } else {
        ALL_TOOLS
            .into_iter()
            .filter(|t| args.only.contains(t))
            .collect()
    }
}

/// What the bench needs before it starts: root, and sane arguments.
fn check(args: &BenchArgs) -> Result<()> {
    if !crate::is_root() {
        bail!(
            "the bench loads eBPF programs (forkprof, bpftrace, perf trace): \
             run `cargo xtask bench` as root"
        );
    }
    if !(args.max_background.is_finite() && args.max_background > 0.0) {
        bail!("--max-background must be a positive number of CPUs");
    }
    if let Some(before) = &args.before
        && !before.is_file()
    {
        bail!("--before {}: no such file", before.display());
    }
    if args.pin {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 {
            bail!("--pin needs 2 CPUs (the loop's and the agent's); this machine has {cpus}");
        }
        let mut not_pinnable: Vec<&str> = tools_of(args)
            .into_iter()
            .filter(|t| !tools::PINNABLE.contains(t))
            .map(|t| t.label())
            .collect();
        if args.ablation {
            not_pinnable.push("--ablation");
        }
        if args.above_floor.is_some() {
            not_pinnable.push("--above-floor");
        }
        if !not_pinnable.is_empty() {
            bail!(
                "--pin applies to the A/A control and the forkprof run rows only \
                 (--only control,forkprof,forkprof-empty,forkprof-precise-ld,forkprof-precise-ld-empty), \
                 without --ablation or --above-floor; not to: {}",
                not_pinnable.join(", ")
            );
        }
    }
    Ok(())
}

/// Installs what the tools need, mounts tracefs, builds forkprof and the loop. Tools that
/// cannot be made ready are added to `unavailable`.
fn prepare(
    args: &BenchArgs,
    tools: &[Tool],
    paths: &Paths,
    unavailable: &mut Unavailable,
) -> Result<()> {
    tools::ensure_packages(tools, args.workload, args.no_install, unavailable)?;
    tools::ensure_tracefs(tools, unavailable);
    if (tools.iter().any(|t| t.is_forkprof()) || args.above_floor.is_some()) && !args.no_build {
        tools::build_forkprof()?;
    }
    tools::compile_loop(paths)
}

/// The empty cgroup that `record --cgroup` records, when that tool is selected; without
/// one, the tool is marked unavailable with the reason.
fn idle_cgroup(
    tools: &[Tool],
    paths: &mut Paths,
    unavailable: &mut Unavailable,
) -> Option<tools::IdleCgroup> {
    if !tools.contains(&Tool::RecordCgroup) {
        return None;
    }
    match tools::IdleCgroup::make() {
        Ok(group) => {
            paths.idle_cgroup = Some(group.shown.clone());
            Some(group)
        }
        Err(e) => {
            let why = format!("{e:#}");
            eprintln!("xtask: bench: {}: {why}", Tool::RecordCgroup.label());
            unavailable.push((Tool::RecordCgroup, why));
            None
        }
    }
}

/// The rows of the table: bare first, then every selected tool in order, those that did
/// not run with the reason.
fn in_table_order(
    bare: Row,
    measured: Vec<Row>,
    tools: &[Tool],
    active: &[Tool],
    unavailable: &Unavailable,
) -> Vec<Row> {
    let mut rows = vec![bare];
    let mut measured = measured.into_iter();
    for &tool in tools {
        if active.contains(&tool) {
            rows.extend(measured.next());
            continue;
        }
        let why = unavailable
            .iter()
            .find(|(t, _)| *t == tool)
            .map_or_else(|| "not run".to_owned(), |(_, why)| why.clone());
        let mut row = Row::new(tool.label(), true);
        row.unavailable = Some(why);
        rows.push(row);
    }
    rows
}
