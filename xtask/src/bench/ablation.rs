//! `--ablation`: each hook family of forkprof alone (FORKPROF_BENCH_ONLY), with empty
//! programs (FORKPROF_BENCH_EMPTY) and with the real ones, each against bare runs; and each
//! family's hits and time per iteration, from the --bpf-stats run of all of them.
//!
//! A family alone runs its programs without the others: its windows open only where it
//! opens them itself (the syscalls and sched families open the fork and exec windows), so
//! "real, alone" is what the family's own gate and bookkeeping cost, and "empty, alone" is
//! its hooks' dispatch.
use anyhow::Result;

use super::BenchArgs;
use super::background::Clock;
use super::bpf_stats::ProgStat;
use super::measure::{self, Row};
use super::stats::{median, median_ci90, pct};
use super::tools::{Paths, Tool};

/// forkprof's hook families, as FORKPROF_BENCH_ONLY names them.
pub(super) const FAMILIES: [&str; 6] = ["syscalls", "sched", "exit", "mmap", "faults", "atime"];

/// The family of one of forkprof's eBPF programs, by its name.
pub(super) fn family_of(program: &str) -> &'static str {
    const PARTS: [(&str, &str); 13] = [
        ("sys_enter", "syscalls"),
        ("sys_exit", "syscalls"),
        ("newtask", "sched"),
        ("prepare_exec", "sched"),
        ("process_exec", "sched"),
        ("begin_new_exec", "sched"),
        ("process_exit", "exit"),
        ("signal_generate", "exit"),
        ("process_free", "exit"),
        ("mmap", "mmap"),
        ("page_fault", "faults"),
        ("wp_fault", "faults"),
        ("dirty_inode", "atime"),
    ];
    PARTS
        .iter()
        .find(|(part, _)| program.contains(part))
        .map_or("other", |(_, family)| family)
}

/// One family's measurements.
pub(super) struct Family {
    pub(super) name: &'static str,
    /// Program runs and nanoseconds per iteration, from bpf_stats (all families attached).
    pub(super) hits_per_iter: Option<f64>,
    pub(super) us_per_iter: Option<f64>,
    pub(super) empty: Row,
    pub(super) real: Row,
}

/// Runs the ablation: for every family, `args.pairs` rounds of (bare, empty alone) and
/// (bare, real alone).
pub(super) fn measure(
    args: &BenchArgs,
    clock: &Clock,
    stats: Option<&[ProgStat]>,
) -> Result<Vec<Family>> {
    let mut out = Vec::new();
    for name in FAMILIES {
        eprintln!("xtask: bench: ablation: {name} alone");
        let mut paths = Paths::new(args.workload);
        paths.only = Some(name);
        let (_, mut rows) =
            measure::pairs(args, &paths, clock, &[Tool::ForkprofEmpty, Tool::Forkprof])?;
        let real = rows.pop().expect("two rows");
        let empty = rows.pop().expect("two rows");
        let n = f64::from(args.iterations());
        let mine: Vec<&ProgStat> = stats
            .unwrap_or_default()
            .iter()
            .filter(|p| family_of(&p.name) == name)
            .collect();
        let (hits, ns) = mine
            .iter()
            .fold((0u64, 0u64), |(h, t), p| (h + p.runs, t + p.run_ns));
        out.push(Family {
            name,
            hits_per_iter: stats.map(|_| hits as f64 / n),
            us_per_iter: stats.map(|_| ns as f64 / n / 1000.0),
            empty,
            real,
        });
    }
    Ok(out)
}

/// The median overhead and its interval, as "+1.2% (+0.5 .. +2.0%)".
fn overhead(ratios: Option<&Vec<f64>>) -> String {
    let Some(r) = ratios else {
        return "-".into();
    };
    let m = median(r).map_or_else(|| "-".to_owned(), pct);
    match median_ci90(r) {
        Some((lo, hi)) => format!("{m} ({} .. {})", pct(lo), pct(hi)),
        None => m,
    }
}

/// The ablation table.
pub(super) fn table(families: &[Family]) -> String {
    let mut cells = vec![[
        "family".to_owned(),
        "hits/iter".into(),
        "us/iter in programs".into(),
        "alone, empty: wall".into(),
        "CPU".into(),
        "alone, real: wall".into(),
        "CPU".into(),
    ]];
    let num = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for f in families {
        let unavailable = |row: &Row| row.unavailable.clone().filter(|_| row.samples.is_empty());
        let (ew, ec) = match unavailable(&f.empty) {
            Some(_) => ("n/a".into(), "n/a".into()),
            None => (
                overhead(f.empty.ratios.as_ref()),
                overhead(f.empty.cpu_ratios.as_ref()),
            ),
        };
        let (rw, rc) = match unavailable(&f.real) {
            Some(_) => ("n/a".into(), "n/a".into()),
            None => (
                overhead(f.real.ratios.as_ref()),
                overhead(f.real.cpu_ratios.as_ref()),
            ),
        };
        cells.push([
            f.name.to_owned(),
            num(f.hits_per_iter, 1),
            num(f.us_per_iter, 2),
            ew,
            ec,
            rw,
            rc,
        ]);
    }
    let mut out = String::from(
        "\nEach hook family alone (FORKPROF_BENCH_ONLY), overhead vs bare (median, 90% CI):\n\n",
    );
    super::report::write_columns(&mut out, &cells);
    out.push_str(
        "hits/iter and us/iter: bpf_stats of the run with every family attached (two clock \
         reads per hit included)\nempty: the family's hooks with programs that return at \
         entry; real: its programs, without the other families' windows\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_has_its_family() {
        for (program, family) in [
            ("forkprof_sys_enter", "syscalls"),
            ("forkprof_sys_exit", "syscalls"),
            ("forkprof_task_newtask", "sched"),
            ("forkprof_sched_prepare_exec", "sched"),
            ("forkprof_sched_process_exec", "sched"),
            ("forkprof_begin_new_exec_fentry", "sched"),
            ("forkprof_sched_process_exit", "exit"),
            ("forkprof_sched_process_exit_task", "exit"),
            ("forkprof_signal_generate", "exit"),
            ("forkprof_sched_process_free", "exit"),
            ("forkprof_mmap_lock_acquired", "mmap"),
            ("forkprof_mmap_lock_released_memcg", "mmap"),
            ("forkprof_dup_mmap_kprobe", "mmap"),
            ("forkprof_dup_mmap_locked_fentry", "mmap"),
            ("forkprof_dup_mmap_unlocked_fentry", "mmap"),
            ("forkprof_dup_mmap_locked_kprobe", "mmap"),
            ("forkprof_page_fault_user", "faults"),
            ("forkprof_wp_fault_fexit", "faults"),
            ("forkprof_dirty_inode_start", "atime"),
            ("forkprof_ld_debug_state", "other"),
        ] {
            assert_eq!(family_of(program), family, "{program}");
        }
    }
}
