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
    assert_eq!((cc.processes, cc.execs), (1, 1));
    let failed = report
        .group(GroupBy::Binary)
        .iter()
        .find(|r| r.binary == "/usr/local/bin/cc")
        .unwrap();
    assert_eq!((failed.processes, failed.failed_execs), (0, 1));
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

/// A parent (/bin/PARENT, pid 1) with `n` fork children that exec /bin/CHILD.
fn family(parent: &[u8], child: &[u8], n: u32, pagetable_ns: u64, failed_per_child: u32) -> Trace {
    let mut t = Trace::default();
    t.set_root(1);
    let root = key(1, 0);
    t.ingest(exec(root, 100_000, parent, 0, 0));
    for i in 0..n {
        let c = key(100 + i, 1_000_000 + u64::from(i) * 10_000_000);
        let Record::Spawn(mut s) = spawn(root, c, 56, SIGCHLD) else {
            unreachable!()
        };
        s.pagetable_copy_ns = pagetable_ns;
        s.fork_ns = pagetable_ns + 10_000;
        t.ingest(Record::Spawn(s));
        for f in 0..failed_per_child {
            t.ingest(exec(
                c,
                c.start_ns + 100_000 + u64::from(f),
                b"/nope/x",
                libc::ENOENT,
                0,
            ));
        }
        t.ingest(exec(c, c.start_ns + 200_000, child, 0, 1));
        t.ingest(ld(c, ld_outcome::COMPLETE));
        t.ingest(exit(c, 0));
    }
    t
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

#[test]
fn hint_dynamic_linking_when_ld_dominates() {
    // ld_* (150+200+50 us) against fork (10 us) + exec (100 us) + teardown (20 us): > 50%.
    let t = family(b"/bin/make", b"/bin/cc", 10, 0, 0);
    let report = Report::build(&t, &Context::for_run(&|_| false));
    let hint = report
        .hints
        .iter()
        .find(|h| h.rule == "dynamic_linking")
        .expect("dynamic_linking hint");
    assert!(
        hint.text.contains("`cc`") && hint.text.contains("to 1 object:"),
        "{}",
        hint.text
    );
    let few = family(b"/bin/make", b"/bin/cc", 9, 0, 0);
    assert!(!hints_of(&few).contains(&"dynamic_linking"));
}

#[test]
fn hint_path_search_counts_failed_execs_per_success() {
    let t = family(b"/bin/sh", b"/bin/cc", 10, 0, 2);
    let report = Report::build(&t, &Context::for_run(&|_| false));
    let hint = report
        .hints
        .iter()
        .find(|h| h.rule == "path_search")
        .expect("hint");
    assert!(
        hint.text.contains("2.0 failed execs per success in `sh`"),
        "{}",
        hint.text
    );
    let once = family(b"/bin/sh", b"/bin/cc", 10, 0, 0);
    assert!(!hints_of(&once).contains(&"path_search"));
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
