//! Findings: rules over a report, each with a threshold, its numbers and what to do.
use serde::Serialize;

use super::Method;
use super::mounts::{Atime, Mount};
use super::phases::Phase;
use super::report::{GroupBy, GroupRow, Report};
use crate::units::duration;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hint {
    /// Stable identifier of the rule.
    pub rule: &'static str,
    pub text: String,
}

/// A parent's forks are worth a hint when this many copy page tables ...
pub const PAGETABLE_MIN_FORKS: u64 = 10;
/// ... for at least this long on average.
pub const PAGETABLE_MIN_MEAN_NS: u64 = 1_000_000;
/// A binary's dynamic linking is worth a hint when it is this share of its spawn cost ...
pub const LD_MIN_SHARE: f64 = 0.5;
/// ... over at least this many processes.
pub const LD_MIN_PROCESSES: u64 = 10;
/// An execvp PATH search is worth a hint at this many failed execs per success ...
pub const PATH_SEARCH_MIN_RATIO: f64 = 1.0;
/// ... and at least this many failed execs.
pub const PATH_SEARCH_MIN_FAILED: u64 = 10;

fn phase_total(row: &GroupRow, phase: Phase) -> u64 {
    row.phases.get(phase).map_or(0, |s| s.total)
}

fn phase_mean(row: &GroupRow, phase: Phase) -> Option<u64> {
    row.phases
        .get(phase)
        .filter(|s| s.count > 0)
        .map(|s| s.mean)
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

pub fn find(report: &Report) -> Vec<Hint> {
    let mut hints = Vec::new();
    for row in report.group(GroupBy::Parent) {
        let forks = row.methods.get(Method::Fork.name()).copied().unwrap_or(0)
            + row.methods.get(Method::Clone3.name()).copied().unwrap_or(0);
        if let Some(mean) = phase_mean(row, Phase::PagetableCopy)
            && forks >= PAGETABLE_MIN_FORKS
            && mean >= PAGETABLE_MIN_MEAN_NS
        {
            hints.push(Hint {
                rule: Phase::PagetableCopy.name(),
                text: format!(
                    "`{}` forks with a large address space: page-table copy {} per fork × {forks} forks; posix_spawn or vfork avoids it",
                    base(&row.binary),
                    duration(mean)
                ),
            });
        }
        if row.failed_execs >= PATH_SEARCH_MIN_FAILED
            && row.failed_execs as f64 >= PATH_SEARCH_MIN_RATIO * row.execs.max(1) as f64
        {
            hints.push(Hint {
                rule: "path_search",
                text: format!(
                    "execvp PATH search: {:.1} failed execs per success in `{}` ({} failed, {}); put the usual directory first in PATH or exec absolute paths",
                    row.failed_execs as f64 / row.execs.max(1) as f64,
                    base(&row.binary),
                    row.failed_execs,
                    duration(phase_total(row, Phase::ExecFailed))
                ),
            });
        }
    }
    for row in report.group(GroupBy::Binary) {
        let ld: u64 = [Phase::LdStart, Phase::LdMap, Phase::LdRelocInit]
            .iter()
            .fold(0u64, |acc, &p| acc.saturating_add(phase_total(row, p)));
        let cost = phase_total(row, Phase::SpawnCost);
        if row.processes >= LD_MIN_PROCESSES && cost > 0 && ld as f64 >= LD_MIN_SHARE * cost as f64
        {
            let objects = row
                .ld_objects_mean
                .map(|n| match format!("{n:.0}").as_str() {
                    "1" => " to 1 object".to_string(),
                    n => format!(" to {n} objects"),
                })
                .unwrap_or_default();
            hints.push(Hint {
                rule: "dynamic_linking",
                text: format!(
                    "`{}` is dynamically linked{objects}: ld_* is {:.0}% of its spawn cost ({} per spawn); static linking or fewer libraries would save most of it",
                    base(&row.binary),
                    100.0 * ld as f64 / cost as f64,
                    duration(ld / row.processes.max(1))
                ),
            });
        }
    }
    if report.summary.atime_updates > 0 {
        let total = report.phases.get(Phase::Atime).map_or(0, |s| s.total);
        hints.push(Hint {
            rule: Phase::Atime.name(),
            text: format!(
                "atime updates on exec: {} ({} in all); {}",
                report.summary.atime_updates,
                duration(total),
                atime_advice(report.atime_mount.as_ref())
            ),
        });
    }
    hints
}

/// What helps against atime updates, given the mount of the binaries that had the most
/// (`None`: the recording machine's mounts are not known). relatime, the default, still
/// updates atime at the first read after each change of a file (every freshly built binary)
/// and once a day, so it is suggested only where a mount is strictatime; noatime, or
/// lazytime (atime kept in memory), is what removes the cost.
fn atime_advice(mount: Option<&Mount>) -> String {
    let Some(m) = mount else {
        return "noatime or lazytime on the binaries' filesystem avoids them (relatime, the \
                default, still updates atime at the first exec after a binary changes, and \
                once a day)"
            .into();
    };
    let at = format!("`{}` ({})", m.mount_point, m.atime_options());
    if !m.dirties_inodes_on_read() {
        return format!(
            "the binaries' filesystem {at} does not update atime on exec: these updates are \
             of other files the execs read (the interpreter or libraries, on another \
             filesystem)"
        );
    }
    match m.atime {
        Atime::Strictatime => format!(
            "the binaries' filesystem {at} updates atime at every exec: noatime or lazytime \
             avoids them; relatime leaves one per change of a binary and per day"
        ),
        _ => format!(
            "the binaries' filesystem {at} still updates atime at the first exec after a \
             binary changes, and once a day: noatime or lazytime avoids them"
        ),
    }
}
