//! Findings: rules over a report, each with a threshold, its numbers and what to do.
use std::collections::BTreeMap;

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

/// What avoids a page-table copy, given how many of the forks it was measured on were never
/// followed by an exec (the child ran on in its parent's image: a snapshot, a worker). Where
/// the child execs, posix_spawn or vfork shares the address space instead of copying it;
/// where it does not, neither can replace the fork, and transparent huge pages shrink the
/// copy: a 2 MiB page is one page-table entry to copy instead of 512. Measured with `forkprof
/// run` on a Python process that forks 12 times with 1 GiB of private anonymous memory
/// written (2-vCPU Intel VM of BENCHMARKS.md): page-table copy 7.1 ms per fork, and the
/// child's exit teardown 8.2 ms; with `madvise(MADV_HUGEPAGE)` on that memory (THP set to
/// `madvise`), 0.63 and 0.53 ms.
fn pagetable_advice(copies: u64, without_exec: u64) -> String {
    const HUGE_PAGES: &str = "transparent huge pages on its large mappings (madvise \
                              MADV_HUGEPAGE) copy one entry per 2 MiB instead of 512, and a \
                              smaller address space copies less";
    match without_exec.min(copies) {
        0 => "its children exec: posix_spawn or vfork avoids it".into(),
        n if n == copies => format!(
            "its children run on without exec (a snapshot, a worker), where posix_spawn and \
             vfork cannot replace fork: {HUGE_PAGES}"
        ),
        n => format!(
            "{} of those children exec'd, for which posix_spawn or vfork avoids it; for the {n} \
             that run on without exec, {HUGE_PAGES}",
            copies - n
        ),
    }
}
/// A binary's dynamic linking is worth a hint when what static linking would save of it is
/// this share of its spawn cost ...
///
/// What it would save is ld.so's mapping and relocation, `ld_map` + `ld_reloc_init`, not
/// `ld_start`: that phase, exec done -> ld.so's first syscall of interest, is mostly the C
/// library's start-up (its CPU-feature probes and tunables), which a static binary runs too,
/// as its `static_start` (docs/kernel-findings.md, "`cpuid` traps"). Measured with `forkprof
/// run` on a shell loop of a dynamic and a static `int main(){return 0;}` (2-vCPU Intel
/// VM, BENCHMARKS.md's "Intel, 2 vCPUs"): spawn cost 898 against 787 µs, so static linking
/// saved 111 µs, where `ld_map` + `ld_reloc_init` were 121 and `ld_*` 794. With
/// `--precise-ld`, `ld_reloc_init` also holds the libraries' constructors, which a static
/// binary runs as well: the share is then an upper bound.
pub const LD_MIN_SHARE: f64 = 0.2;
/// ... over at least this many processes whose dynamic linking was measured (an `ld_map`: a
/// fork child that never exec'd counts in its binary's row, but not here).
pub const LD_MIN_PROCESSES: u64 = 10;
/// A binary's library search is worth a hint when ld.so opens at least this many paths per
/// exec beyond its objects and ld.so.cache (over `LD_MIN_PROCESSES` processes) ...
///
/// Each directory of RUNPATH, RPATH or LD_LIBRARY_PATH that ld.so tries before the one
/// holding a library costs an `openat` that fails for each of its hardware-capability
/// subdirectories (glibc 2.36 tries 19 a directory: `glibc-hwcaps/x86-64-v2..v4`, the legacy
/// `tls/haswell/...` ones, and the directory itself) and a `stat` of each. Measured with
/// `forkprof run` on `int main(){}` linked with a RUNPATH of 10 directories that do not
/// exist, against the same without, 50 of each in turn (2-vCPU Intel VM with eIBRS,
/// BENCHMARKS.md's "Intel, 2 vCPUs, eIBRS"; glibc 2.36): 192 opens per exec instead of 2,
/// and ld_map 361.6 µs instead of 67.3, 1.5 µs a path; the spawn cost 820 µs instead of 526.
/// So 20 such paths are some 30 µs, 5% of that spawn.
pub const LD_SEARCH_MIN_MISSES: f64 = 20.0;
/// An execvp PATH search is worth a hint at this many failed execs per success ...
pub const PATH_SEARCH_MIN_RATIO: f64 = 1.0;
/// ... and at least this many failed execs.
pub const PATH_SEARCH_MIN_FAILED: u64 = 10;
/// The directories a PATH search hint names before "…".
const PATH_SEARCH_DIRS_SHOWN: usize = 3;

/// Whether a rule may read a group of grouping `by` with these processes and failed exec
/// attempts: a report that keeps only some rows (`Context::group_rows`) keeps these, and
/// the binaries of each kept parent's `searched_name`, so that its hints are those of every
/// row. Each rule's threshold bounds a count that is at most the group's processes (forks,
/// processes with an `ld_map`), or is its failed attempts.
pub fn may_read(by: GroupBy, processes: u64, failed_execs: u64) -> bool {
    match by {
        GroupBy::Parent => {
            processes >= PAGETABLE_MIN_FORKS || failed_execs >= PATH_SEARCH_MIN_FAILED
        }
        GroupBy::Binary => processes >= LD_MIN_PROCESSES,
        _ => false,
    }
}

fn phase_total(row: &GroupRow, phase: Phase) -> u64 {
    row.phases.get(phase).map_or(0, |s| s.total)
}

/// The row's processes whose dynamic linking was measured (an `ld_map`): what the ld.so
/// hints count, not the row's processes, of which a fork child that never exec'd is one.
fn ld_measured(row: &GroupRow) -> u64 {
    row.phases.get(Phase::LdMap).map_or(0, |s| s.count)
}

fn phase_mean(row: &GroupRow, phase: Phase) -> Option<u64> {
    row.phases
        .get(phase)
        .filter(|s| s.count > 0)
        .map(|s| s.mean)
}

/// A path's directory ("/" for the root, "" when it has none) and last component.
fn split_path(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some(split) => split,
        None => ("", path),
    }
}

/// A path's last component: how hints name a binary (`cc1`).
pub(crate) fn base(path: &str) -> &str {
    split_path(path).1
}

/// A name's failed exec attempts: how many, and how many in each directory.
type Tries<'r> = (u64, BTreeMap<&'r str, u64>);

/// The name a parent's failed execs tried most often (of two alike, the first by name, so
/// that a report reads the same each time), with its tries.
fn searched_most(row: &GroupRow) -> Option<(&str, Tries<'_>)> {
    let mut names: BTreeMap<&str, Tries<'_>> = BTreeMap::new();
    for (path, &n) in &row.failed_exec_paths {
        let (dir, name) = split_path(path);
        // A name tried without a directory is listed under "/".
        let dir = if dir.is_empty() { "/" } else { dir };
        let entry = names.entry(name).or_default();
        entry.0 += n;
        *entry.1.entry(dir).or_default() += n;
    }
    names
        .into_iter()
        .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.0.cmp(a.0)))
}

/// The name whose binary rows the PATH search hint of a parent's row reads, if any.
pub fn searched_name(row: &GroupRow) -> Option<&str> {
    searched_most(row).map(|(name, _)| name)
}

/// What a parent's failed execs looked for, from `failed_exec_paths`: the name most of them
/// tried, how many paths a search for it tried, where, and the directory that held it (the
/// binary rows' only one of that name): ", all for `as`: 8.0 a search, in /root/bin,
/// /opt/bin and 5 more directories ahead of /usr/bin". With the advice that follows it.
fn searched_for(report: &Report, row: &GroupRow) -> (String, String) {
    let generic = "put the usual directory first in PATH or exec absolute paths".to_string();
    let Some((name, (tries, dirs))) = searched_most(row) else {
        return (String::new(), generic);
    };
    let which = if tries == row.failed_execs {
        "all".to_string()
    } else {
        format!("{tries} of them")
    };
    let searches = row
        .failed_exec_searches
        .get(name)
        .copied()
        .unwrap_or(1)
        .max(1);
    let mut dirs: Vec<(&str, u64)> = dirs.into_iter().collect();
    dirs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let shown: Vec<&str> = dirs
        .iter()
        .take(PATH_SEARCH_DIRS_SHOWN)
        .map(|d| d.0)
        .collect();
    let listed = match dirs.len() - shown.len() {
        0 => shown.join(", "),
        1 => format!("{} and 1 more directory", shown.join(", ")),
        n => format!("{} and {n} more directories", shown.join(", ")),
    };
    // Where the search ended: the directory of the only binary of that name exec'd.
    let found: Vec<&str> = report
        .group(GroupBy::Binary)
        .iter()
        .map(|b| split_path(&b.binary))
        .filter(|&(dir, n)| n == name && !dir.is_empty())
        .map(|(dir, _)| dir)
        .collect();
    let (ahead, advice) = match found.as_slice() {
        [dir] => (
            format!(" ahead of {dir}"),
            format!("put {dir} first in PATH or exec absolute paths"),
        ),
        _ => (String::new(), generic),
    };
    (
        format!(
            ", {which} for `{name}`: {:.1} a search, in {listed}{ahead}",
            tries as f64 / searches as f64
        ),
        advice,
    )
}

pub fn find(report: &Report) -> Vec<Hint> {
    let mut hints = Vec::new();
    for row in report.group(GroupBy::Parent) {
        let forks = row.methods.get(Method::Fork.name()).copied().unwrap_or(0)
            + row.methods.get(Method::Clone3.name()).copied().unwrap_or(0);
        if let Some(copy) = row.phases.get(Phase::PagetableCopy)
            && copy.count > 0
            && forks >= PAGETABLE_MIN_FORKS
            && copy.mean >= PAGETABLE_MIN_MEAN_NS
        {
            hints.push(Hint {
                rule: Phase::PagetableCopy.name(),
                text: format!(
                    "`{}` forks with a large address space: page-table copy {} per fork × {forks} forks; {}",
                    base(&row.binary),
                    duration(copy.mean),
                    pagetable_advice(copy.count, row.pagetable_copies_without_exec)
                ),
            });
        }
        if row.failed_execs >= PATH_SEARCH_MIN_FAILED
            && row.failed_execs as f64 >= PATH_SEARCH_MIN_RATIO * row.execs.max(1) as f64
        {
            let (searched, advice) = searched_for(report, row);
            hints.push(Hint {
                rule: "path_search",
                text: format!(
                    "execvp PATH search: {:.1} failed execs per success in `{}` ({} failed, {}){searched}; {advice}",
                    row.failed_execs as f64 / row.execs.max(1) as f64,
                    base(&row.binary),
                    row.failed_execs,
                    duration(phase_total(row, Phase::ExecFailed)),
                ),
            });
        }
    }
    for row in report.group(GroupBy::Binary) {
        let linking =
            phase_total(row, Phase::LdMap).saturating_add(phase_total(row, Phase::LdRelocInit));
        let cost = phase_total(row, Phase::SpawnCost);
        if ld_measured(row) >= LD_MIN_PROCESSES
            && cost > 0
            && linking as f64 >= LD_MIN_SHARE * cost as f64
        {
            let (objects, them) = match row.ld_objects_mean.map(objects_loaded) {
                Some((n, true)) => (format!(" to {n}"), "it"),
                Some((n, false)) => (format!(" to {n}"), "them"),
                None => (String::new(), "its libraries"),
            };
            let start = phase_mean(row, Phase::LdStart)
                .map(|mean| {
                    format!(
                        ", but not ld_start ({} per spawn), which a static binary pays as static_start",
                        duration(mean)
                    )
                })
                .unwrap_or_default();
            hints.push(Hint {
                rule: "dynamic_linking",
                text: format!(
                    "`{}` is dynamically linked{objects}: loading and relocating {them} (ld_map + ld_reloc_init) is {:.0}% of its spawn cost ({} per spawn); static linking would save that and fewer libraries part of it{start}",
                    base(&row.binary),
                    100.0 * linking as f64 / cost as f64,
                    duration(linking / row.processes.max(1))
                ),
            });
        }
        hints.extend(library_search(row));
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

/// A mean count of loaded objects as the hints word it ("1 object", "3 objects"), and whether
/// it reads as one.
fn objects_loaded(mean: f64) -> (String, bool) {
    match format!("{mean:.0}") {
        n if n == "1" => ("1 object".to_string(), true),
        n => (format!("{n} objects"), false),
    }
}

/// ld.so's library search for a binary's processes, where it opened many paths that hold no
/// object. Each object is one open and ld.so.cache (when the search reaches it) one more, so
/// the rest, at least, were tried in vain.
fn library_search(row: &GroupRow) -> Option<Hint> {
    let (openat, objects) = (row.ld_openat_mean?, row.ld_objects_mean?);
    let in_vain = openat - objects - 1.0;
    if ld_measured(row) < LD_MIN_PROCESSES || in_vain < LD_SEARCH_MIN_MISSES {
        return None;
    }
    let (objects, _) = objects_loaded(objects);
    let ld_map = phase_mean(row, Phase::LdMap)
        .map(|mean| {
            format!(
                "; ld_map, which holds those opens, is {} per spawn",
                duration(mean)
            )
        })
        .unwrap_or_default();
    Some(Hint {
        rule: "library_search",
        text: format!(
            "`{}`: ld.so opened {openat:.0} paths per exec to load {objects}, at least {in_vain:.0} of them in vain (each directory of RUNPATH, RPATH or LD_LIBRARY_PATH tried ahead of the one that holds a library, with its hardware-capability subdirectories){ld_map}: put the directory that holds the libraries first, or drop the directories that hold none",
            base(&row.binary),
        ),
    })
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
