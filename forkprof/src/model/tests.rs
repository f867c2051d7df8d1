//! The model from synthetic records: no kernel involved.
use forkprof_common::{ProcKey, ld_outcome};

use super::report::{Context, GroupBy, Report, SortBy};
use super::tests_support::*;
use super::{Method, Phases, Trace, phases::Phase};
use crate::decode::Record;

/// root (pid 1) execs /bin/make; make forks a child (pid 2) which fails one exec, then
/// execs /bin/cc, links dynamically and exits 0; the records arrive out of order.
fn sample() -> Trace {
    let mut t = Trace::default();
    t.set_root(1);
    let root = key(1, 0);
    let child = key(2, 1_000_000);
    t.ingest(exec(root, 500_000, b"/bin/make", 0, 0));
    // The child's records before its spawn record (as with vfork).
    t.ingest(exec(
        child,
        1_200_000,
        b"/usr/local/bin/cc",
        libc::ENOENT,
        0,
    ));
    t.ingest(exec(child, 1_400_000, b"/bin/cc", 0, 3));
    t.ingest(spawn(root, child, 56, SIGCHLD));
    t.ingest(ld(child, ld_outcome::COMPLETE));
    t.ingest(exit(child, 0));
    t.ingest(exit(root, 7 << 8));
    t
}

#[test]
fn phases_of_a_forked_dynamic_child() {
    let t = sample();
    let child = t.get(&key(2, 1_000_000)).unwrap();
    assert_eq!(child.method, Method::Fork);
    let ph = Phases::of(child, false);
    assert_eq!(ph.get(Phase::Fork), Some(40_000));
    assert_eq!(ph.get(Phase::PagetableCopy), Some(30_000));
    assert_eq!(ph.get(Phase::VforkWait), None);
    assert_eq!(ph.get(Phase::Exec), Some(100_000));
    assert_eq!(ph.get(Phase::ExecFailed), Some(10_000));
    assert_eq!(ph.get(Phase::LdMap), Some(200_000));
    assert_eq!(ph.get(Phase::CowFaults), Some(3));
    assert_eq!(ph.get(Phase::Atime), Some(10_000));
    assert_eq!(ph.get(Phase::ExitTeardown), Some(20_000));
    let parts = 40_000 + 100_000 + 10_000 + 150_000 + 200_000 + 50_000 + 20_000;
    assert_eq!(ph.get(Phase::SpawnCost), Some(parts));
}

#[test]
fn static_binaries_show_zero_ld_and_unknown_loaders_show_nothing() {
    let mut t = Trace::default();
    let p = key(5, 10);
    t.ingest(spawn(key(1, 0), p, 57, SIGCHLD));
    t.ingest(exec(p, 100_000, b"/bin/static", 0, 0));
    t.ingest(ld(p, ld_outcome::NO_GLIBC_LD));
    let proc = t.get(&p).unwrap();
    assert_eq!(Phases::of(proc, true).get(Phase::LdStart), Some(0));
    assert_eq!(Phases::of(proc, false).get(Phase::LdStart), None);
    // No arch_prctl(ARCH_SET_FS) seen: the static start-up is not measured, never 0.
    assert_eq!(Phases::of(proc, true).get(Phase::StaticStart), None);
    // With it: static_start, in spawn_cost; for a binary that has an interpreter, nothing.
    let q = key(6, 20);
    t.ingest(spawn(key(1, 0), q, 57, SIGCHLD));
    t.ingest(exec(q, 100_000, b"/bin/static", 0, 0));
    let Record::Ld(mut rec) = ld(q, ld_outcome::NO_GLIBC_LD) else {
        unreachable!()
    };
    rec.static_start_ns = 500_000;
    t.ingest(Record::Ld(rec));
    let ph = Phases::of(t.get(&q).unwrap(), true);
    assert_eq!(ph.get(Phase::StaticStart), Some(500_000));
    assert_eq!(ph.get(Phase::SpawnCost), Some(40_000 + 100_000 + 500_000));
    assert_eq!(
        Phases::of(t.get(&q).unwrap(), false).get(Phase::StaticStart),
        None
    );
    // A dynamic binary whose ld.so was measured: static_start does not apply, so it is not
    // counted (it used to be a 0 that pulled the phase's mean below its p50).
    let dynamic = sample();
    let cc = dynamic.get(&key(2, 1_000_000)).unwrap();
    assert_eq!(Phases::of(cc, false).get(Phase::StaticStart), None);
}

#[test]
fn binaries_follow_exec_and_inherit_from_the_parent() {
    let t = sample();
    let b = t.binaries(&t.by_start());
    let at = |k: ProcKey| t.processes.iter().position(|p| p.key == k).unwrap();
    assert_eq!(&*b[at(key(1, 0))].last, b"/bin/make");
    assert_eq!(&*b[at(key(2, 1_000_000))].at_spawn, b"/bin/make");
    assert_eq!(&*b[at(key(2, 1_000_000))].last, b"/bin/cc");
}

#[test]
fn report_groups_by_binary_and_parent() {
    let t = sample();
    let report = Report::build(
        &t,
        &Context {
            command: vec!["make".into()],
            wall_ns: 2_000_000_000,
            ..Context::for_run(&|_| false)
        },
    );
    assert_eq!(report.summary.processes, 2);
    assert_eq!(report.summary.execs, 2);
    assert_eq!(report.summary.failed_execs, 1);
    assert_eq!(report.summary.atime_updates, 3);
    assert_eq!(report.methods.get("fork"), Some(&1));
    assert_eq!(report.summary.spawn_rate_peak_per_s, 1.0);
    assert!((report.summary.spawn_rate_mean_per_s - 0.5).abs() < 1e-9);
    let cc = report
        .group(GroupBy::Binary)
        .iter()
        .find(|r| r.binary == "/bin/cc")
        .unwrap();
    // The failed attempt before it (a PATH search) counts in its row, not in a row of its own.
    assert_eq!((cc.processes, cc.execs, cc.failed_execs), (1, 1, 1));
    assert!(
        report
            .group(GroupBy::Binary)
            .iter()
            .all(|r| r.binary != "/usr/local/bin/cc")
    );
    let make = report
        .group(GroupBy::Parent)
        .iter()
        .find(|r| r.binary == "/bin/make")
        .unwrap();
    assert_eq!((make.processes, make.failed_execs), (1, 1));
    // Sorted by total spawn cost: the child (cc) costs more than the root (make).
    assert_eq!(report.group(GroupBy::Binary)[0].binary, "/bin/cc");
    let root = report
        .processes
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.pid == 1)
        .unwrap();
    assert_eq!(root.exit, Some(super::trace::ExitStatus::Code(7)));
}

#[test]
fn exit_status_decoding() {
    use super::trace::ExitStatus;
    assert_eq!(ExitStatus::from_wait_code(7 << 8), ExitStatus::Code(7));
    assert_eq!(ExitStatus::from_wait_code(9), ExitStatus::Signal(9));
    assert_eq!(
        ExitStatus::from_wait_code(0x80 | 11),
        ExitStatus::Signal(11)
    );
    assert_eq!(ExitStatus::Signal(9).shell_code(), 137);
}

/// A parent (pid 1, which exec'd PARENT) and `n` children, 10 ms apart: `child(trace,
/// parent, child, i)` adds each child's records, its spawn first.
fn children(
    parent: &[u8],
    n: u32,
    mut child: impl FnMut(&mut Trace, ProcKey, ProcKey, u32),
) -> Trace {
    let mut t = Trace::default();
    t.set_root(1);
    let root = key(1, 0);
    t.ingest(exec(root, 100_000, parent, 0, 0));
    for i in 0..n {
        child(
            &mut t,
            root,
            key(100 + i, 1_000_000 + u64::from(i) * 10_000_000),
            i,
        );
    }
    t
}

/// Failed execs (ENOENT) of process `c`, one per path in order, before its exec at 200 µs.
fn failed_execs(t: &mut Trace, c: ProcKey, paths: &[&[u8]]) {
    for (f, path) in paths.iter().enumerate() {
        t.ingest(exec(
            c,
            c.start_ns + 100_000 + f as u64,
            path,
            libc::ENOENT,
            0,
        ));
    }
}

/// A parent (/bin/PARENT, pid 1) with `n` fork children that exec /bin/CHILD.
fn family(parent: &[u8], child: &[u8], n: u32, pagetable_ns: u64, failed_per_child: u32) -> Trace {
    children(parent, n, |t, root, c, _| {
        let Record::Spawn(mut s) = spawn(root, c, 56, SIGCHLD) else {
            unreachable!()
        };
        s.pagetable_copy_ns = pagetable_ns;
        s.fork_ns = pagetable_ns + 10_000;
        t.ingest(Record::Spawn(s));
        failed_execs(t, c, &vec![&b"/nope/x"[..]; failed_per_child as usize]);
        t.ingest(exec(c, c.start_ns + 200_000, child, 0, 1));
        t.ingest(ld(c, ld_outcome::COMPLETE));
        t.ingest(exit(c, 0));
    })
}

/// The text of `t`'s hint of `rule`, which must be there.
fn hint_text(t: &Trace, rule: &str) -> String {
    let hints = Report::build(t, &Context::for_run(&|_| false)).hints;
    hints
        .iter()
        .find(|h| h.rule == rule)
        .map(|h| h.text.clone())
        .unwrap_or_else(|| panic!("no {rule} hint in {hints:?}"))
}

fn hints_of(t: &Trace) -> Vec<&'static str> {
    Report::build(t, &Context::for_run(&|_| false))
        .hints
        .iter()
        .map(|h| h.rule)
        .collect()
}

#[test]
fn hint_pagetable_copy_needs_many_slow_forks() {
    use super::hints::{PAGETABLE_MIN_FORKS, PAGETABLE_MIN_MEAN_NS};
    let slow = family(
        b"/bin/make",
        b"/bin/cc",
        PAGETABLE_MIN_FORKS as u32,
        PAGETABLE_MIN_MEAN_NS,
        0,
    );
    assert!(hints_of(&slow).contains(&"pagetable_copy"));
    let fast = family(b"/bin/make", b"/bin/cc", 20, PAGETABLE_MIN_MEAN_NS / 2, 0);
    assert!(!hints_of(&fast).contains(&"pagetable_copy"));
    let few = family(
        b"/bin/make",
        b"/bin/cc",
        PAGETABLE_MIN_FORKS as u32 - 1,
        5_000_000,
        0,
    );
    assert!(!hints_of(&few).contains(&"pagetable_copy"));
}

/// The page-table copy's advice follows what the children did after the fork: exec'd
/// (posix_spawn or vfork), ran on in the parent's image (huge pages), or some of each.
#[test]
fn hint_pagetable_copy_advice_follows_whether_the_children_exec() {
    // A parent whose first `execing` children exec /bin/cc and the rest exit unexec'd, each
    // fork's page-table copy 2 ms.
    let forks = |n: u32, execing: u32| {
        children(b"/usr/bin/redis-server", n, |t, root, c, i| {
            let Record::Spawn(mut s) = spawn(root, c, 56, SIGCHLD) else {
                unreachable!()
            };
            s.pagetable_copy_ns = 2_000_000;
            t.ingest(Record::Spawn(s));
            if i < execing {
                t.ingest(exec(c, c.start_ns + 200_000, b"/bin/cc", 0, 1));
            }
            t.ingest(exit(c, 0));
        })
    };
    let hint = |t: &Trace| {
        let text = hint_text(t, "pagetable_copy");
        assert!(
            text.starts_with(
                "`redis-server` forks with a large address space: page-table copy 2.0 ms per fork × 12 forks; "
            ),
            "{text}"
        );
        text
    };
    let all = hint(&forks(12, 12));
    assert!(
        all.ends_with("its children exec: posix_spawn or vfork avoids it"),
        "{all}"
    );
    let none = hint(&forks(12, 0));
    assert!(
        none.contains("its children run on without exec")
            && none.contains("posix_spawn and vfork cannot replace fork")
            && none.contains("copy one entry per 2 MiB instead of 512"),
        "{none}"
    );
    let some = hint(&forks(12, 5));
    assert!(
        some.contains("5 of those children exec'd, for which posix_spawn or vfork avoids it; for the 7 that run on without exec, transparent huge pages"),
        "{some}"
    );
}

#[test]
fn hint_dynamic_linking_when_ld_dominates() {
    // ld_map + ld_reloc_init (200+50 us) of fork (10 us) + exec (100 us) + ld_* (150+200+50
    // us) + teardown (20 us): 47%, over the 20% line.
    let t = family(b"/bin/make", b"/bin/cc", 10, 0, 0);
    let hint = hint_text(&t, "dynamic_linking");
    assert!(
        hint.contains("`cc`")
            && hint.contains("to 1 object:")
            && hint
                .contains("(ld_map + ld_reloc_init) is 47% of its spawn cost (250.0 µs per spawn)")
            && hint.contains("but not ld_start (150.0 µs per spawn)"),
        "{hint}"
    );
    let few = family(b"/bin/make", b"/bin/cc", 9, 0, 0);
    assert!(!hints_of(&few).contains(&"dynamic_linking"));
}

/// A complete dynamic-linker record of `proc`, whose ld.so opened `openat` paths to load
/// `objects` objects.
fn ld_searched(proc: ProcKey, openat: u32, objects: u32) -> Record {
    let Record::Ld(mut l) = ld(proc, ld_outcome::COMPLETE) else {
        unreachable!()
    };
    l.openat_count = openat;
    l.objects = objects;
    Record::Ld(l)
}

/// `n` children of `/bin/sh` that exec `/opt/app/bin/tool`, whose ld.so opened `openat` paths
/// to load `objects` objects.
fn searching(n: u32, openat: u32, objects: u32) -> Trace {
    children(b"/bin/sh", n, |t, root, c, _| {
        t.ingest(spawn(root, c, 56, SIGCHLD));
        t.ingest(exec(c, c.start_ns + 200_000, b"/opt/app/bin/tool", 0, 1));
        t.ingest(ld_searched(c, openat, objects));
        t.ingest(exit(c, 0));
    })
}

#[test]
fn hint_library_search_counts_the_paths_opened_in_vain() {
    use super::hints::{LD_MIN_PROCESSES, LD_SEARCH_MIN_MISSES};
    let n = LD_MIN_PROCESSES as u32;
    // 4 objects and ld.so.cache: 192 - 5 = 187 paths that held nothing.
    let hint = hint_text(&searching(n, 192, 4), "library_search");
    assert_eq!(
        hint,
        "`tool`: ld.so opened 192 paths per exec to load 4 objects, at least 187 of them in vain \
         (each directory of RUNPATH, RPATH or LD_LIBRARY_PATH tried ahead of the one that holds \
         a library, with its hardware-capability subdirectories); ld_map, which holds those \
         opens, is 200.0 µs per spawn: put the directory that holds the libraries first, or \
         drop the directories that hold none"
    );
    let report = Report::build(&searching(n, 192, 4), &Context::for_run(&|_| false));
    let row = report
        .group(GroupBy::Binary)
        .iter()
        .find(|r| r.binary == "/opt/app/bin/tool")
        .expect("the binary's row");
    assert_eq!(
        (row.ld_openat_mean, row.ld_objects_mean),
        (Some(192.0), Some(4.0))
    );
    // At the line, and one path under it.
    let at = LD_SEARCH_MIN_MISSES as u32 + 4 + 1;
    assert!(hints_of(&searching(n, at, 4)).contains(&"library_search"));
    assert!(!hints_of(&searching(n, at - 1, 4)).contains(&"library_search"));
    // Too few processes.
    assert!(!hints_of(&searching(n - 1, 192, 4)).contains(&"library_search"));
    // A search that found everything at once: the objects and ld.so.cache.
    assert!(!hints_of(&searching(n, 5, 4)).contains(&"library_search"));
}

/// A binary exec'd once, whose process then forks children that exit without an exec (as
/// `fp-workload demo` does): its row counts them all, but ld.so ran once, and one exec is no
/// ground for a hint about ld.so.
#[test]
fn ld_hints_count_the_execs_measured_not_the_processes() {
    use super::hints::LD_MIN_PROCESSES;
    let n = LD_MIN_PROCESSES as u32;
    let t = children(b"/opt/app/bin/tool", n, |t, root, c, i| {
        if i == 0 {
            t.ingest(ld_searched(root, 192, 4));
        }
        t.ingest(spawn(root, c, 56, SIGCHLD));
        t.ingest(exit(c, 0));
    });
    let report = Report::build(&t, &Context::for_run(&|_| false));
    let row = report
        .group(GroupBy::Binary)
        .iter()
        .find(|r| r.binary == "/opt/app/bin/tool")
        .expect("the binary's row");
    assert_eq!(row.processes, u64::from(n) + 1);
    assert_eq!(row.ld_openat_mean, Some(192.0));
    let hints = hints_of(&t);
    assert!(
        !hints.contains(&"library_search") && !hints.contains(&"dynamic_linking"),
        "{hints:?}"
    );
}

/// What static linking saves is ld.so's mapping and relocation, not `ld_start`, which a
/// static binary pays as `static_start`: a binary whose `ld_*` is mostly `ld_start` (as
/// `int main(){}` is on a VM where `cpuid` traps) gets no hint, though `ld_*` is most of its
/// spawn cost.
#[test]
fn no_dynamic_linking_hint_where_ld_start_is_most_of_ld() {
    let t = children(b"/bin/sh", 20, |t, root, c, _| {
        t.ingest(spawn(root, c, 56, SIGCHLD));
        t.ingest(exec(c, c.start_ns + 200_000, b"/bin/true", 0, 1));
        // The t_dyn of the constant's doc: ld_start 673 us, ld_map 49, ld_reloc_init 72.
        t.ingest(Record::Ld(forkprof_common::LdRecord {
            ld_start_ns: 673_000,
            ld_map_ns: 49_000,
            ld_reloc_init_ns: 72_000,
            ..match ld(c, ld_outcome::COMPLETE) {
                Record::Ld(l) => l,
                _ => unreachable!(),
            }
        }));
        t.ingest(exit(c, 0));
    });
    let report = Report::build(&t, &Context::for_run(&|_| false));
    let binary = report
        .group(GroupBy::Binary)
        .iter()
        .find(|r| r.binary == "/bin/true")
        .expect("the binary's row");
    let ld: u64 = [Phase::LdStart, Phase::LdMap, Phase::LdRelocInit]
        .iter()
        .map(|&p| binary.phases.get(p).map_or(0, |s| s.total))
        .sum();
    let cost = binary.phases.get(Phase::SpawnCost).unwrap().total;
    assert!(
        ld * 10 > cost * 8,
        "ld_* is most of the cost: {ld} of {cost}"
    );
    assert!(
        !hints_of(&t).contains(&"dynamic_linking"),
        "{:?}",
        report.hints
    );
}

#[test]
fn hint_path_search_counts_failed_execs_per_success() {
    let t = family(b"/bin/sh", b"/bin/cc", 10, 0, 2);
    let hint = hint_text(&t, "path_search");
    // Both tries of each child were /nope/x, and no `x` was exec'd: no directory to name.
    assert!(
        hint.contains("2.0 failed execs per success in `sh`")
            && hint.contains("all for `x`: 2.0 a search, in /nope;")
            && hint.ends_with("put the usual directory first in PATH or exec absolute paths"),
        "{hint}"
    );
    let once = family(b"/bin/sh", b"/bin/cc", 10, 0, 0);
    assert!(!hints_of(&once).contains(&"path_search"));
}

/// The PATH search hint names what was searched for, the directories tried (the one named
/// twice in PATH first), and the directory where each search ended.
#[test]
fn hint_path_search_names_the_directories_ahead() {
    let tried: [&[u8]; 6] = [
        b"/root/bin/as",
        b"/opt/a/as",
        b"/opt/b/as",
        b"/opt/c/as",
        b"/root/bin/as",
        b"/usr/local/bin/as",
    ];
    let t = children(b"/usr/bin/gcc", 5, |t, root, c, _| {
        t.ingest(spawn(root, c, 56, SIGCHLD));
        failed_execs(t, c, &tried);
        t.ingest(exec(c, c.start_ns + 200_000, b"/usr/bin/as", 0, 1));
        t.ingest(exit(c, 0));
    });
    let hint = hint_text(&t, "path_search");
    assert_eq!(
        hint.split_once(" µs)").map(|(_, rest)| rest),
        Some(
            ", all for `as`: 6.0 a search, in /root/bin, /opt/a, /opt/b and 2 more directories \
             ahead of /usr/bin; put /usr/bin first in PATH or exec absolute paths"
        ),
        "{hint}"
    );
}

/// Of failed execs for two names, the hint names the one tried most, and how many of the
/// failures were its.
#[test]
fn hint_path_search_names_the_name_tried_most() {
    let t = children(b"/bin/sh", 6, |t, root, c, i| {
        t.ingest(spawn(root, c, 56, SIGCHLD));
        let (name, found): (&[u8], &[u8]) = if i < 4 {
            (b"/opt/x/cc", b"/usr/bin/cc")
        } else {
            (b"/opt/x/ld", b"/usr/bin/ld")
        };
        failed_execs(t, c, &[name, name]);
        t.ingest(exec(c, c.start_ns + 200_000, found, 0, 1));
        t.ingest(exit(c, 0));
    });
    let hint = hint_text(&t, "path_search");
    assert!(
        hint.contains("(12 failed, ")
            && hint.contains("), 8 of them for `cc`: 2.0 a search, in /opt/x ahead of /usr/bin;"),
        "{hint}"
    );
}

#[test]
fn hint_atime_when_exec_dirtied_inodes() {
    let t = sample();
    assert!(hints_of(&t).contains(&"atime"));
}

#[test]
fn a_reused_pid_is_another_process() {
    let mut t = Trace::default();
    let first = key(500, 1_000_000);
    let second = key(500, 9_000_000);
    t.ingest(spawn(key(1, 0), first, 57, SIGCHLD));
    t.ingest(exec(first, 1_500_000, b"/bin/a", 0, 0));
    t.ingest(exit(first, 0));
    t.ingest(spawn(key(1, 0), second, 58, SIGCHLD | 0x4100));
    t.ingest(exec(second, 9_500_000, b"/bin/b", 0, 0));
    assert_eq!(t.processes.len(), 2);
    assert_eq!(t.get(&first).unwrap().method, Method::Fork);
    assert_eq!(t.get(&second).unwrap().method, Method::Vfork);
    assert!(t.get(&second).unwrap().exit.is_none());
    let b = t.binaries(&t.by_start());
    let names: Vec<&[u8]> = b.iter().map(|x| &*x.last).collect();
    assert!(names.contains(&&b"/bin/a"[..]) && names.contains(&&b"/bin/b"[..]));
}

/// One recording gives one set of hints whatever view is asked for: hints read the binary
/// and parent groupings even when `--by method` (or another `--sort`) is shown.
#[test]
fn hints_do_not_change_with_the_view() {
    let mut t = Trace::default();
    let root = key(1, 0);
    for i in 0..12 {
        let p = key(100 + i, 1_000 + u64::from(i));
        t.ingest(spawn(root, p, 57, SIGCHLD));
        // A PATH search: two failed attempts before the exec that works.
        t.ingest(exec(p, 200_000, b"/usr/local/bin/tool", 2, 0));
        t.ingest(exec(p, 210_000, b"/usr/bin/tool", 2, 0));
        t.ingest(exec(p, 400_000, b"/bin/tool", 0, 0));
    }
    let hints = |groupings: Vec<GroupBy>, sort: SortBy| {
        let ctx = Context {
            groupings,
            sort,
            ..Context::for_run(&|_| false)
        };
        Report::build(&t, &ctx).hints
    };
    let default = hints(vec![GroupBy::Binary, GroupBy::Parent], SortBy::Total);
    assert!(!default.is_empty(), "the PATH search is a finding");
    assert_eq!(hints(vec![GroupBy::Method], SortBy::Total), default);
    assert_eq!(hints(vec![GroupBy::Ancestry], SortBy::Count), default);
    // Only the groupings asked for are shown.
    let ctx = Context {
        groupings: vec![GroupBy::Method],
        ..Context::for_run(&|_| false)
    };
    let report = Report::build(&t, &ctx);
    assert_eq!(
        report.groups.keys().copied().collect::<Vec<_>>(),
        ["method"]
    );
}

/// A PATH search is one finding: the failed attempts count in the row of the binary that
/// was finally exec'd, beside their `exec_failed` time, and a search that found nothing is
/// one `not found: NAME` row; every path tried is kept in the row's JSON. (The failed
/// attempts used to get a row each, with 0 processes, and the binary's row showed 0 failed
/// execs next to its `exec_failed` time.)
#[test]
fn a_path_search_is_one_finding_in_the_row_of_the_binary_execd() {
    let mut t = Trace::default();
    t.set_root(1);
    let root = key(1, 0);
    t.ingest(exec(root, 100_000, b"/usr/bin/gcc", 0, 0));
    let dirs: [&[u8]; 2] = [b"/usr/local/bin/as", b"/root/bin/as"];
    for i in 0..3 {
        let c = key(10 + i, 1_000_000 * u64::from(i + 1));
        t.ingest(spawn(root, c, 56, SIGCHLD));
        for (n, path) in dirs.iter().enumerate() {
            t.ingest(exec(c, c.start_ns + 100 + n as u64, path, libc::ENOENT, 0));
        }
        t.ingest(exec(c, c.start_ns + 200_000, b"/usr/bin/as", 0, 0));
    }
    // A search that found nothing (EACCES in one directory: execvp says so).
    let lost = key(20, 9_000_000);
    t.ingest(spawn(root, lost, 56, SIGCHLD));
    t.ingest(exec(lost, 9_000_100, b"/usr/local/bin/ld", libc::ENOENT, 0));
    t.ingest(exec(lost, 9_000_200, b"/usr/bin/ld", libc::EACCES, 0));
    let gone = key(21, 9_500_000);
    t.ingest(spawn(root, gone, 56, SIGCHLD));
    t.ingest(exec(
        gone,
        9_500_100,
        b"/usr/local/bin/cc1",
        libc::ENOENT,
        0,
    ));
    t.ingest(exec(gone, 9_500_200, b"/usr/bin/cc1", libc::ENOTDIR, 0));

    let report = Report::build(&t, &Context::for_run(&|_| false));
    let rows = report.group(GroupBy::Binary);
    let names: Vec<&str> = rows.iter().map(|r| r.binary.as_str()).collect();
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with("/usr/local/") && !n.starts_with("/root/")),
        "no row per directory tried: {names:?}"
    );
    let row = |name: &str| rows.iter().find(|r| r.binary == name).unwrap();
    let r#as = row("/usr/bin/as");
    assert_eq!((r#as.processes, r#as.execs, r#as.failed_execs), (3, 3, 6));
    let failed = r#as.phases.get(Phase::ExecFailed).unwrap();
    assert_eq!((failed.count, failed.total), (3, 6 * 10_000));
    assert_eq!(
        r#as.failed_exec_paths,
        [
            ("/root/bin/as".to_string(), 3),
            ("/usr/local/bin/as".into(), 3)
        ]
        .into()
    );
    let cc1 = row("not found: cc1");
    assert_eq!((cc1.processes, cc1.execs, cc1.failed_execs), (1, 0, 2));
    let ld = row("cannot execute: ld");
    assert_eq!((ld.processes, ld.failed_execs), (1, 2));
    assert_eq!(row("/usr/bin/gcc").failed_execs, 0);
    // The summary and the parent grouping count every attempt.
    assert_eq!(report.summary.failed_execs, 10);
    let gcc = &report.group(GroupBy::Parent)[0];
    assert_eq!(
        (gcc.binary.as_str(), gcc.failed_execs),
        ("/usr/bin/gcc", 10)
    );
    assert_eq!(gcc.failed_exec_paths.values().sum::<u64>(), 10);
}

/// A process that existed before tracing began is labelled from /proc (`Found`): its
/// binary, its parent's, and the binary its children were forked from. It used to be
/// `[forkprof]` for all three.
#[test]
fn processes_found_running_are_labelled_from_proc() {
    use super::trace::Found;
    let mut t = Trace::default();
    let bash = key(300, 0);
    let child = key(301, 5_000_000);
    // bash (pre-existing) forks a child that execs ls, then exits; it never execs.
    t.ingest(spawn(bash, child, 56, SIGCHLD));
    t.ingest(exec(child, 5_200_000, b"/usr/bin/ls", 0, 0));
    t.ingest(exit(child, 0));
    t.ingest(exit(bash, 0));
    let labels = |t: &Trace| {
        let b = t.binaries(&t.by_start());
        let at = |k: ProcKey| t.processes.iter().position(|p| p.key == k).unwrap();
        (
            b[at(bash)].last.to_vec(),
            b[at(bash)].at_spawn.to_vec(),
            b[at(child)].at_spawn.to_vec(),
        )
    };
    let (own, parent, childs_parent) = labels(&t);
    assert!(
        ![&own, &parent, &childs_parent]
            .iter()
            .any(|l| l.as_slice() == b"[forkprof]"),
        "forkprof did not start it"
    );
    t.found(&Found {
        key: key(300, 0),
        binary: b"/usr/bin/bash".to_vec(),
        parent_binary: Some(b"/usr/bin/tmux".to_vec()),
    });
    let (own, parent, childs_parent) = labels(&t);
    assert_eq!(own, b"/usr/bin/bash");
    assert_eq!(parent, b"/usr/bin/tmux");
    assert_eq!(childs_parent, b"/usr/bin/bash");
    // A pre-existing parent seen only in its children's spawn records is not a process of
    // the report, but still names their parent.
    let mut t = Trace::default();
    t.found(&Found {
        key: key(400, 0),
        binary: b"/usr/sbin/cron".to_vec(),
        parent_binary: None,
    });
    let c = key(401, 1_000_000);
    t.ingest(spawn(key(400, 0), c, 56, SIGCHLD));
    assert_eq!(t.processes.len(), 1);
    assert_eq!(&*t.binaries(&[0])[0].at_spawn, b"/usr/sbin/cron");
    // The process `forkprof run` started is still forkprof's.
    let s = sample();
    let b = s.binaries(&s.by_start());
    let root = s.processes.iter().position(|p| p.key == key(1, 0)).unwrap();
    assert_eq!(&*b[root].at_spawn, b"[forkprof]");
}

/// The atime hint reads the mount of the binaries with the most updates: relatime is only
/// suggested where a mount is strictatime (it used to be suggested on relatime mounts,
/// where it is already in force); noatime or lazytime is what removes the cost.
#[test]
fn hint_atime_suggests_what_the_mount_lacks() {
    use super::mounts::parse_mountinfo;
    let atime_hint = |mountinfo: &str| {
        let mut t = sample();
        t.mounts = parse_mountinfo(mountinfo);
        Report::build(&t, &Context::for_run(&|_| false))
            .hints
            .into_iter()
            .find(|h| h.rule == "atime")
            .expect("atime hint")
            .text
    };
    let relatime = atime_hint("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n");
    assert!(relatime.contains("`/` (relatime)"), "{relatime}");
    assert!(relatime.contains("noatime or lazytime"), "{relatime}");
    assert!(!relatime.contains("with relatime"), "{relatime}");
    let strict = atime_hint(
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n30 22 7:0 / /bin rw - ext4 /dev/loop0 rw\n",
    );
    assert!(strict.contains("`/bin` (strictatime)"), "{strict}");
    assert!(strict.contains("relatime leaves one"), "{strict}");
    let none = atime_hint("22 1 8:1 / / rw,noatime - ext4 /dev/sda1 rw\n");
    assert!(none.contains("other files"), "{none}");
    let lazy = atime_hint("22 1 8:1 / / rw,relatime - xfs /dev/sda1 rw,lazytime\n");
    assert!(lazy.contains("other files"), "{lazy}");
    // Mounts not known (a recording of schema 3): nothing that assumes them.
    let unknown = atime_hint("");
    assert!(
        unknown.contains("noatime or lazytime") && unknown.contains("relatime, the default, still"),
        "{unknown}"
    );
}

/// A record's cgroup id set to `id`.
fn in_cgroup(mut r: Record, id: u64) -> Record {
    match &mut r {
        Record::Spawn(s) => s.cgroup_id = id,
        Record::Exec(e) => e.cgroup_id = id,
        _ => {}
    }
    r
}

#[test]
fn cgroups_group_by_where_a_process_execd_else_where_it_was_created() {
    const SVC: u64 = 10;
    const POD: u64 = 11;
    let mut t = Trace::default();
    t.cgroup(SVC, b"/system.slice/nginx.service");
    t.cgroup(
        POD,
        b"/kubepods.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
    );
    let root = key(1, 0);
    // Created in the service and stays (no exec).
    let a = key(2, 1_000);
    t.ingest(in_cgroup(spawn(root, a, 57, SIGCHLD), SVC));
    // Created in the service, moved to the pod, exec'd there.
    let b = key(3, 2_000);
    t.ingest(in_cgroup(spawn(root, b, 57, SIGCHLD), SVC));
    t.ingest(in_cgroup(exec(b, 5_000_000, b"/bin/cc", 0, 0), POD));
    // A cgroup that was never named, and a kernel without cgroup v2.
    let c = key(4, 3_000);
    t.ingest(in_cgroup(spawn(root, c, 57, SIGCHLD), 99));
    let d = key(5, 4_000);
    t.ingest(spawn(root, d, 57, SIGCHLD));
    let report = |by| {
        let r = Report::build(
            &t,
            &Context {
                groupings: vec![by],
                ..Context::for_run(&|_| false)
            },
        );
        let mut rows: Vec<(String, u64)> = r
            .group(by)
            .iter()
            .map(|g| (g.binary.clone(), g.processes))
            .collect();
        rows.sort();
        rows
    };
    let pod = "/kubepods.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope";
    assert_eq!(
        report(GroupBy::Cgroup),
        vec![
            (pod.to_string(), 1),
            ("/system.slice/nginx.service".into(), 1),
            ("?".into(), 1),
            ("cgroup 99".into(), 1),
        ]
    );
    assert_eq!(
        report(GroupBy::Unit),
        vec![
            ("0123456789ab".into(), 1),
            ("?".into(), 1),
            ("cgroup 99".into(), 1),
            ("nginx.service".into(), 1),
        ]
    );
}

/// `--flamegraph --by cgroup` (or `unit`) roots each stack at the process's cgroup, so one
/// graph splits spawn cost by service first; without it the stack starts at the root.
#[test]
fn flame_graph_stacks_can_be_rooted_at_the_cgroup() {
    let mut t = Trace::default();
    t.set_root(1);
    let (root, a, b) = (key(1, 0), key(2, 1_000_000), key(3, 2_000_000));
    t.ingest(exec(root, 500_000, b"/bin/make", 0, 0));
    for (k, path, cgroup) in [(a, &b"/bin/cc"[..], 11), (b, &b"/bin/ld"[..], 12)] {
        let mut s = spawn(root, k, 56, SIGCHLD);
        if let Record::Spawn(r) = &mut s {
            r.cgroup_id = cgroup;
        }
        t.ingest(s);
        t.ingest(exec(k, k.start_ns + 200_000, path, 0, 0));
        t.ingest(exit(k, 0));
    }
    t.cgroup(11, b"/system.slice/build.service");
    t.cgroup(12, b"/system.slice/link;er.service");
    let folded = |flame_root| {
        let ctx = Context {
            folded: true,
            flame_root,
            ..Context::for_run(&|_| false)
        };
        let stacks: Vec<String> = Report::build(&t, &ctx)
            .folded
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        stacks
    };
    // The root (run's command) has a spawn cost too; it has no cgroup id here: `?`.
    assert_eq!(folded(None), ["make", "make;cc", "make;ld"]);
    assert_eq!(
        folded(Some(GroupBy::Cgroup)),
        [
            "/system.slice/build.service;make;cc",
            "/system.slice/link_er.service;make;ld",
            "?;make"
        ]
    );
    assert_eq!(
        folded(Some(GroupBy::Unit)),
        ["?;make", "build.service;make;cc", "link_er.service;make;ld"]
    );
}

/// A fork-family syscall in flight when tracing began: the kernel saw its entry and return
/// but not task_newtask, so its record names the parent where the child would be. It is
/// counted apart, never as a process whose parent is itself: the recording reader's
/// assembler once walked that "ancestry" forever, until memory ran out.
#[test]
fn a_spawn_whose_child_was_not_seen_is_counted_apart() {
    let parent = key(10, 100);
    let child = key(11, 500);
    let mut unseen = spawn(parent, parent, 435, 0);
    if let Record::Spawn(s) = &mut unseen {
        s.child_tid = 0;
    }
    let records = [
        unseen,
        spawn(parent, child, 57, SIGCHLD),
        exit(child, 0),
        exit(parent, 0),
    ];
    let mut t = Trace::default();
    for r in records.iter().cloned() {
        t.ingest(r);
    }
    assert_eq!(
        (t.spawns_child_unseen, t.failed_spawns, t.threads),
        (1, 0, 0)
    );
    assert_eq!(t.get(&parent).unwrap().parent, None);
    let report = Report::build(&t, &Context::for_run(&|_| false));
    assert_eq!(report.summary.spawns_child_unseen, 1);
    assert_eq!(report.summary.processes, 2);

    let mut asm = super::assemble::Assembler::new(Trace::default());
    let mut handed = Vec::new();
    let mut sink = |_: &Trace, p: &super::Process, _: &_, _: &_| {
        handed.push(p.key);
        Ok(())
    };
    for r in records {
        asm.ingest(r, &mut sink).unwrap();
    }
    asm.finish(&mut sink).unwrap();
    handed.sort();
    assert_eq!(handed, [parent, child]);
}

/// A chain of processes each forked by the one before keeps stacks of at most
/// `STACK_FRAMES` frames: the root, `[...]` and the nearest ancestors. Ten thousand deep, its
/// stacks then take a bounded number of bytes, where whole ones took 50 million.
#[test]
fn a_deep_chain_keeps_bounded_stacks_with_the_root_and_the_nearest_ancestors() {
    use crate::model::trace::{ELIDED_FRAMES, Names, STACK_FRAMES};
    let mut names = Names::default();
    let mut stack = names.stack(b"", b"/usr/sbin/daemon");
    let mut all = 0usize;
    let mut kept = Vec::new();
    for depth in 1..10_000u32 {
        stack = names.stack(&stack, format!("/bin/p{}", depth % 7).as_bytes());
        all += stack.len();
        let frames: Vec<&[u8]> = stack.split(|&b| b == b';').collect();
        assert_eq!(frames.len(), (depth as usize + 1).min(STACK_FRAMES));
        assert_eq!(frames[0], b"daemon", "the root stays");
        assert_eq!(
            *frames.last().unwrap(),
            format!("p{}", depth % 7).as_bytes(),
            "its own frame is last"
        );
        if depth as usize >= STACK_FRAMES {
            assert_eq!(frames[1], ELIDED_FRAMES);
            assert_eq!(
                frames[frames.len() - 2],
                format!("p{}", (depth - 1) % 7).as_bytes(),
                "the parent is next to last"
            );
        }
        kept.push(stack.clone());
    }
    // Bounded: each stack is at most 64 frames of a few bytes.
    assert!(
        kept.iter().all(|s| s.len() < STACK_FRAMES * 8),
        "a stack outgrew its bound"
    );
    assert!(all < 10_000 * STACK_FRAMES * 8, "{all} bytes of stacks");
    // Below the bound a stack is whole: the ancestry as before.
    let short = names.stack(b"make;sh", b"/usr/bin/gcc");
    assert_eq!(&*short, &b"make;sh;gcc"[..]);
}

/// A table's report builds the rows it shows (`Context::group_rows`) and those a hint reads,
/// not every group's: its first rows, its phase means' rows, its group counts and its hints
/// are those of the report with every row, in every order. The trace has a binary per
/// child beside a library search (`/opt/app/bin/tool`, 10 processes) and a PATH search for
/// `as`, whose row (/usr/bin/as, 5 processes: too few for a hint of its own) the search's
/// hint reads for the directory it ended in.
#[test]
fn a_table_builds_the_rows_it_shows_and_those_the_hints_read() {
    let tried: Vec<&[u8]> = [&b"/opt/a/as"[..], b"/opt/b/as", b"/opt/c/as", b"/opt/d/as"].repeat(5);
    let t = children(b"/bin/sh", 70, |t, root, c, i| {
        t.ingest(spawn(root, c, 56, SIGCHLD));
        let at = c.start_ns + 200_000;
        match i {
            0..10 => {
                t.ingest(exec(c, at, b"/opt/app/bin/tool", 0, 1));
                t.ingest(ld_searched(c, 192, 4));
            }
            10..15 => {
                failed_execs(t, c, &tried);
                t.ingest(exec(c, at, b"/usr/bin/as", 0, 1));
            }
            15 => {
                // A wrapper that execs the real program: the wrapper's row has an exec and
                // no process.
                t.ingest(exec(c, at - 1_000, b"/usr/bin/wrapper", 0, 1));
                t.ingest(exec(c, at, b"/usr/bin/real", 0, 1));
            }
            _ => {
                let path = format!("/tmp/build-{i}/tool");
                t.ingest(exec(c, at, path.as_bytes(), 0, u64::from(i)));
                t.ingest(ld(c, ld_outcome::COMPLETE));
            }
        }
        t.ingest(exit(c, 0));
    });
    let rows_json = |rows: &[super::report::GroupRow]| serde_json::to_string(rows).unwrap();
    for sort in [SortBy::Total, SortBy::Mean, SortBy::P99, SortBy::Count] {
        let every = Report::build(
            &t,
            &Context {
                sort,
                ..Context::for_run(&|_| false)
            },
        );
        assert!(
            every.hints.iter().any(|h| h.rule == "library_search")
                && every
                    .hints
                    .iter()
                    .any(|h| h.rule == "path_search" && h.text.contains("ahead of /usr/bin;")),
            "{:?}",
            every.hints
        );
        for n in [0, 1, 3, 20] {
            let some = Report::build(
                &t,
                &Context {
                    sort,
                    group_rows: Some(n),
                    ..Context::for_run(&|_| false)
                },
            );
            let hints = |r: &Report| r.hints.iter().map(|h| h.text.clone()).collect::<Vec<_>>();
            assert_eq!(hints(&some), hints(&every), "{sort:?} {n}");
            for by in [GroupBy::Binary, GroupBy::Parent] {
                let (all, kept) = (every.group(by), some.group(by));
                assert_eq!(some.group_count(by.name()), all.len(), "{by:?}");
                let first = n.min(all.len());
                assert_eq!(
                    rows_json(&kept[..first]),
                    rows_json(&all[..first]),
                    "{by:?}"
                );
                // The phase means' rows: the first `n` with processes.
                let with_processes = |rows: &[super::report::GroupRow]| {
                    let shown: Vec<_> = rows.iter().filter(|r| r.processes > 0).take(n).collect();
                    serde_json::to_string(&shown).unwrap()
                };
                assert_eq!(with_processes(kept), with_processes(all), "{by:?}");
            }
            // 70 binaries and more: the table's report holds far fewer rows.
            let kept = some.group(GroupBy::Binary).len();
            assert!(kept <= n + 3, "{sort:?} {n}: {kept} rows");
        }
    }
}

/// `record`'s derived tables take the per-process rows of a report without groupings: it
/// builds no group (whose memory grows with the binaries), and its rows are `run`'s.
#[test]
fn a_report_without_groupings_builds_the_rows_alone() {
    let t = sample();
    let rows = |ctx: &Context| {
        let report = Report::build(&t, ctx);
        (
            report.groups.len(),
            serde_json::to_string(&report.processes).unwrap(),
        )
    };
    let (groups, run) = rows(&Context::for_run(&|_| false));
    assert_eq!(groups, 2);
    let (none, derived) = rows(&Context {
        groupings: Vec::new(),
        ..Context::for_run(&|_| false)
    });
    assert_eq!(none, 0);
    assert_eq!(derived, run);
    assert!(run.contains("/bin/cc"), "{run}");
}
