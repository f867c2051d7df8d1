//! The streaming report (`Recording::processes` into a `ReportBuilder`) equals the report
//! of the whole trace in memory (`Recording::load` and `Report::build`, what `run` uses) on
//! a simulated recording of 100,000 processes written by the real writer: counts, totals,
//! means, percentiles, groups, hints, flame-graph stacks and per-process rows, for each
//! grouping and filter.
//!
//! The simulation has what real recordings have and what makes streaming hard: children
//! whose exec record comes before their spawn record (the child ran first), vfork children
//! whose exit comes before it, parents that exec again after forking, orphans that outlive
//! their parent, processes still running at the end, processes found running (labelled and
//! not), threads, failed spawns, failed exec attempts, cgroups named and not, and records
//! slightly out of time order, as the kernel's ring buffer hands them over.
use std::path::Path;

use forkprof_common::{COMM_LEN, ExitRecord, LdRecord, ld_outcome};

use super::{Recording, Writer};
use crate::decode::Record;
use crate::model::report::{Context, Filter, GroupBy, Item, ReportBuilder};
use crate::model::tests_support::{exec, hdr, key, spawn};
use crate::model::trace::{Binaries, Found, Origin, file_name};
use crate::model::{Process, Report, Trace};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const US: u64 = 1_000;
const CLONE_VM: u64 = 0x100;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_THREAD: u64 = 0x10000;
const SIGCHLD: u64 = 17;

fn comm(name: &[u8]) -> [u8; COMM_LEN] {
    let mut c = [0u8; COMM_LEN];
    let n = name.len().min(COMM_LEN - 1);
    c[..n].copy_from_slice(&name[..n]);
    c
}

struct Sim {
    rng: Rng,
    t: u64,
    next_pid: u32,
    records: Vec<(u64, Record)>,
    /// Live processes: key, and its comm.
    live: Vec<(forkprof_common::ProcKey, Vec<u8>)>,
}

impl Sim {
    fn binary(&mut self) -> Vec<u8> {
        match self.rng.below(40) {
            0 => b"/bin/sh".to_vec(),
            1 => b"/usr/bin/make".to_vec(),
            2 => b"/opt/odd;name".to_vec(),
            n => format!("/usr/bin/tool{n}").into_bytes(),
        }
    }

    fn cgroup(&mut self) -> u64 {
        [0, 11, 12, 13, 99][self.rng.below(5) as usize]
    }

    fn push(&mut self, ts: u64, mut r: Record) {
        match &mut r {
            Record::Spawn(s) => s.hdr.ts_ns = ts,
            Record::Exec(e) => e.hdr.ts_ns = ts,
            Record::Ld(l) => l.hdr.ts_ns = ts,
            Record::Exit(x) => x.hdr.ts_ns = ts,
        }
        self.records.push((ts, r));
    }

    /// A successful exec (after 0 to 2 failed PATH-search attempts) and its ld.so window,
    /// from `t`; returns the time after them, and the binary.
    fn exec(&mut self, k: forkprof_common::ProcKey, mut t: u64) -> (u64, Vec<u8>) {
        let binary = self.binary();
        for _ in 0..self.rng.below(3) {
            t += 5 * US;
            let mut r = exec(k, t, b"/usr/local/bin/missing", libc::ENOENT, 0);
            if let Record::Exec(e) = &mut r {
                e.exec_ns = 3 * US + self.rng.below(10 * US);
                e.cgroup_id = self.cgroup();
            }
            self.push(t, r);
        }
        t += 100 * US + self.rng.below(400 * US);
        let mut r = exec(k, t, &binary, 0, self.rng.below(5));
        if let Record::Exec(e) = &mut r {
            e.exec_ns = 60 * US + self.rng.below(900 * US);
            e.cgroup_id = self.cgroup();
            e.child_run_ns = self.rng.below(50 * US);
        }
        self.push(t, r);
        if self.rng.chance(90) {
            t += 300 * US + self.rng.below(2_000 * US);
            let ld = LdRecord {
                hdr: hdr(forkprof_common::kind::LD, t, k),
                outcome: ld_outcome::COMPLETE,
                openat_count: 2 + self.rng.below(6) as u32,
                objects: 1 + self.rng.below(6) as u32,
                ld_start_ns: 100 * US + self.rng.below(300 * US),
                ld_map_ns: 50 * US + self.rng.below(500 * US),
                ld_reloc_init_ns: 20 * US + self.rng.below(200 * US),
                atime_count: self.rng.below(2) as u32,
                ..Default::default()
            };
            self.push(t, Record::Ld(ld));
        }
        (t, binary)
    }

    fn exit(&mut self, k: forkprof_common::ProcKey, name: &[u8], t: u64) {
        let r = Record::Exit(ExitRecord {
            hdr: hdr(forkprof_common::kind::EXIT, t, k),
            exit_code: [0, 1 << 8, 9][self.rng.below(3) as usize],
            notified: u32::from(self.rng.chance(97)),
            exit_teardown_ns: 10 * US + self.rng.below(200 * US),
            cow_faults: self.rng.below(20),
            cow_fault_ns: self.rng.below(30 * US),
            exit_ns: t.saturating_sub(20 * US),
            child_run_ns: self.rng.below(40 * US),
            cgroup_id: self.cgroup(),
            comm: comm(file_name(name)),
        });
        self.push(t, r);
    }

    /// One step: mostly a spawn (with its child's exec and sometimes its exit), else an
    /// exit, an exec again, a thread or a failed spawn.
    fn step(&mut self) -> bool {
        self.t += US + self.rng.below(150 * US);
        let t = self.t;
        let pi = self.rng.below(self.live.len() as u64) as usize;
        let (parent, pname) = self.live[pi].clone();
        match self.rng.below(100) {
            0..=54 => {
                let child = key(self.next_pid, t);
                self.next_pid += 1;
                let (syscall, flags) = match self.rng.below(4) {
                    0 => (57, SIGCHLD),
                    1 => (58, CLONE_VM | CLONE_VFORK | SIGCHLD),
                    2 => (435, CLONE_VM | CLONE_VFORK),
                    _ => (56, SIGCHLD),
                };
                let mut r = spawn(parent, child, syscall, flags);
                if let Record::Spawn(s) = &mut r {
                    s.start_ns = t.saturating_sub(2 * US);
                    s.fork_ns = 20 * US + self.rng.below(200 * US);
                    s.pagetable_copy_ns = self.rng.below(100 * US);
                    s.cgroup_id = self.cgroup();
                    s.parent_comm = comm(&pname);
                }
                let vfork = flags & CLONE_VFORK != 0;
                let (end, name) = if self.rng.chance(85) {
                    self.exec(child, t + US)
                } else {
                    (t + 20 * US, pname.clone())
                };
                // Short children exit at once (a vfork child that never execs does).
                let short = self.rng.chance(60) || (vfork && end == t + 20 * US);
                if short {
                    let at = end + 50 * US + self.rng.below(500 * US);
                    self.exit(child, &name, at);
                }
                // The parent's fork returns: a vfork parent after its child's exec or exit;
                // a fork parent mostly at once, but sometimes after a child that ran first
                // has exec'd.
                let back = if vfork || self.rng.chance(10) {
                    end + US + self.rng.below(30 * US)
                } else {
                    t + US + self.rng.below(20 * US)
                };
                if let Record::Spawn(s) = &mut r
                    && vfork
                {
                    s.vfork_wait_ns = back - t;
                }
                self.push(back, r);
                if !short {
                    self.live.push((child, name));
                }
            }
            55..=84 if self.live.len() > 3 && pi > 2 => {
                self.exit(parent, &pname, t);
                self.live.swap_remove(pi);
            }
            85..=89 => {
                // A parent execs again after forking (`exec` at the end of a script).
                let (_, name) = self.exec(parent, t);
                self.live[pi].1 = name;
            }
            90..=95 => {
                let mut r = spawn(parent, key(self.next_pid, t), 56, CLONE_VM | CLONE_THREAD);
                self.next_pid += 1;
                if let Record::Spawn(s) = &mut r {
                    s.parent_comm = comm(&pname);
                }
                self.push(t + US, r);
            }
            _ => {
                let mut r = spawn(parent, key(0, t), 57, SIGCHLD);
                if let Record::Spawn(s) = &mut r {
                    s.errno = -libc::EAGAIN;
                }
                self.push(t + US, r);
            }
        }
        true
    }
}

/// Writes a simulated recording of about `n` processes to `path`, with empty derived
/// tables.
fn simulate(path: &Path, n: u32) {
    let writer = simulated(path, n);
    let trace = Trace::default();
    let report = Report::build(&trace, &Context::for_run(&|_| false));
    writer.finish(&trace.lost, &report, Vec::new()).unwrap();
}

/// The writer of a simulated recording of about `n` processes to `path`, every record sent.
fn simulated(path: &Path, n: u32) -> Writer {
    let root = key(100, 0);
    let mut sim = Sim {
        rng: Rng(0x9e37_79b9_7f4a_7c15),
        t: 1_000_000_000,
        next_pid: 1000,
        records: Vec::new(),
        live: vec![
            (root, b"/usr/bin/make".to_vec()),
            (key(101, 0), b"unlabelled".to_vec()),
            (key(102, 0), b"/usr/sbin/cron".to_vec()),
        ],
    };
    sim.exec(root, 1_000_000_000);
    while sim.next_pid < 1000 + n {
        sim.step();
    }
    let end = sim.t;
    // The ring buffer hands records over slightly out of time order.
    sim.records.sort_by_key(|(ts, _)| *ts);
    for i in 1..sim.records.len() {
        if sim.records[i].0 - sim.records[i - 1].0 < 10 * US && sim.rng.chance(30) {
            sim.records.swap(i - 1, i);
        }
    }
    let meta = vec![
        ("wall_ns".to_string(), (end - 1_000_000_000).to_string()),
        ("root_pid".to_string(), "100".to_string()),
    ];
    let writer = Writer::create(path, None, meta, true).unwrap();
    writer.found(&Found {
        key: key(102, 0),
        binary: b"/usr/sbin/cron".to_vec(),
        parent_binary: Some(b"/usr/lib/systemd/systemd".to_vec()),
    });
    for (id, name) in [(11, "/a.service"), (12, "/b.slice/c.service"), (13, "/x;y")] {
        writer.cgroup(id, name.as_bytes());
    }
    for (_, r) in &sim.records {
        writer.record(r.clone());
    }
    writer
}

fn context<'a>(
    is_static: &'a dyn Fn(&[u8]) -> bool,
    groupings: Vec<GroupBy>,
    filter: Filter,
) -> Context<'a> {
    Context {
        command: Vec::new(),
        exit: None,
        wall_ns: 0,
        sources: Default::default(),
        is_static,
        groupings,
        sort: Default::default(),
        group_rows: None,
        filter,
        processes: true,
        folded: true,
        flame_root: None,
    }
}

const EVERY_GROUPING: [GroupBy; 6] = [
    GroupBy::Binary,
    GroupBy::Parent,
    GroupBy::Ancestry,
    GroupBy::Method,
    GroupBy::Cgroup,
    GroupBy::Unit,
];

/// A simulated recording of about `n` processes (`simulate`) in a new directory named after
/// `tag`: the directory and the recording.
fn simulated_recording(tag: &str, n: u32) -> (std::path::PathBuf, Recording) {
    let dir = scratch(tag);
    let path = dir.join("sim.db");
    simulate(&path, n);
    let recording = Recording::open(&path).unwrap();
    (dir, recording)
}

/// A new empty directory of this test process's own, named after `tag`.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The report with its per-process rows sorted, as JSON.
fn json(mut report: Report) -> serde_json::Value {
    if let Some(rows) = report.processes.as_mut() {
        rows.sort_by_key(|r| (r.start_ns, r.pid));
    }
    let folded = report.folded.clone();
    let mut v = serde_json::to_value(&report).unwrap();
    v["folded"] = serde_json::to_value(folded).unwrap();
    v
}

#[test]
fn the_streaming_report_equals_the_report_in_memory() {
    // About 100,000 processes (some pids go to threads).
    let (dir, recording) = simulated_recording("forkprof-equivalence", 112_000);
    let wall_ns = recording.meta["wall_ns"].parse().unwrap();
    let whole = recording.load(true).unwrap();
    assert!(whole.processes.len() > 100_000, "{}", whole.processes.len());
    let is_static = |p: &[u8]| p.ends_with(b"tool7");
    let second = 1_000_000_000;
    // Every grouping in one report, then a filtered one.
    let all = EVERY_GROUPING.to_vec();
    let cases = [
        (all, Filter::default()),
        (
            vec![GroupBy::Unit],
            Filter {
                binary: Some("tool1".into()),
                from_ns: Some(2 * second),
                to_ns: Some(5 * second),
            },
        ),
    ];
    let mut held = 0;
    for (by, filter) in cases {
        let mut ctx = context(&is_static, by, filter);
        let groups = ctx.groupings.len();
        ctx.wall_ns = wall_ns;
        let in_memory = json(Report::build(&whole, &ctx));
        let mut start = recording.stream_start(true).unwrap();
        start.first_ns = whole.first_ns;
        let mut builder = ReportBuilder::new(&ctx);
        let mut rows = Vec::new();
        let mut sink = |trace: &Trace, p: &Process, b: &Binaries, o: &Origin| {
            let item = Item::of(p, b, o);
            if let Some(row) = builder.add(trace, item).and_then(|a| a.row) {
                rows.push(row);
            }
            held = held.max(trace.processes.len());
            Ok(())
        };
        let trace = recording.processes(start, true, &mut sink).unwrap();
        let streamed = json(builder.finish(&trace, Some(rows)));
        assert!(
            in_memory == streamed,
            "{:?} differs: {}",
            ctx.groupings,
            first_difference(&in_memory, &streamed)
        );
        assert!(
            in_memory["summary"]["processes"].as_u64().unwrap() > 0,
            "the case covers processes"
        );
        assert_eq!(in_memory["groups"].as_object().unwrap().len(), groups);
    }
    // It streamed: far fewer processes were held at once than the recording has.
    assert!(held < whole.processes.len() / 4, "{held}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `diff`'s side of a recording read one process at a time (`SideBuilder`, as `forkprof
/// diff` reads it, with only the report rows its hints read) is the side of the whole trace
/// in memory (`Side::build`, every row), whatever the grouping: the same diff, bootstrap intervals included, which do not depend on the order
/// the processes come in.
#[test]
fn the_streamed_diff_side_equals_the_side_in_memory() {
    use crate::model::diff::{self, Side, SideBuilder, compare};
    // Small: each diff bootstraps every group and phase (1,000 resamples of each value).
    let (dir, recording) = simulated_recording("forkprof-diff-side", 2_000);
    let whole = recording.load(false).unwrap();
    let is_static = |p: &[u8]| p.ends_with(b"tool7");
    for by in EVERY_GROUPING {
        let ctx = Context {
            processes: false,
            ..context(&is_static, diff::groupings(by), Filter::default())
        };
        // As `forkprof diff` reads a recording: the report's rows only those its hints
        // read.
        let streamed_ctx = Context {
            group_rows: Some(0),
            processes: false,
            ..context(&is_static, diff::groupings(by), Filter::default())
        };
        let streamed = || {
            let mut side = SideBuilder::default();
            let start = recording.stream_start(false).unwrap();
            let report = recording
                .report(&streamed_ctx, start, false, &mut |_, _, _, added| {
                    side.add(&added);
                    Ok(())
                })
                .unwrap();
            side.finish(report)
        };
        let in_memory = || Side::build(&whole, &ctx);
        let json = |before: Side, after: Side| {
            serde_json::to_value(compare(&before, &after, by, 2.0)).unwrap()
        };
        // Both sides streamed give the diff of both in memory.
        let a = json(in_memory(), in_memory());
        let b = json(streamed(), streamed());
        assert!(a == b, "{by:?} differs: {}", first_difference(&a, &b));
        let rows = a["rows"].as_array().unwrap();
        assert!(rows.len() > 3, "{by:?}: {} rows", rows.len());
        if by == GroupBy::Binary {
            assert!(
                rows.iter().any(|r| r["interval_method"] == "bootstrap"),
                "the case covers the bootstrap"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every row of a table of the recording at `path`, in the order of `order`.
fn rows(path: &Path, table: &str, order: &str) -> Vec<Vec<rusqlite::types::Value>> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut st = conn
        .prepare(&format!("SELECT * FROM {table} ORDER BY {order}"))
        .unwrap();
    let columns = st.column_count();
    st.query_map([], |r| (0..columns).map(|i| r.get(i)).collect())
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// `record`'s derived tables, read back from the file one process at a time, are those
/// `run -o` writes from the whole trace in memory.
#[test]
fn the_tables_derived_from_the_file_equal_those_of_the_trace_in_memory() {
    let dir = scratch("forkprof-derived");
    let from_file = dir.join("from-file.db");
    let n = simulated(&from_file, 30_000)
        .finish_from_file(&Default::default(), Vec::new(), Default::default())
        .unwrap();
    let whole = Recording::open(&from_file).unwrap().load(false).unwrap();
    let loaders = crate::elf::InterpCache::default();
    let is_static = |p: &[u8]| loaders.is_static(p);
    let report = Report::build(&whole, &Context::for_run(&is_static));
    let in_memory = dir.join("in-memory.db");
    let written = Writer::create(&in_memory, None, Vec::new(), false)
        .unwrap()
        .finish(&whole.lost, &report, Vec::new())
        .unwrap();
    assert!(n > 25_000, "{n}");
    assert_eq!(n, written);
    for (table, order) in [
        ("processes", "pid, start_ns"),
        ("phases", "pid, start_ns, phase"),
    ] {
        let (a, b) = (
            rows(&from_file, table, order),
            rows(&in_memory, table, order),
        );
        assert!(a.len() as u64 >= n, "{table}: {} rows", a.len());
        if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
            panic!("{table} row {i}: {:?} vs {:?}", a.get(i), b.get(i));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where two JSON values first differ (for the failure message).
fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> String {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) if v != w => return format!("{k}.{}", first_difference(v, w)),
                    None => return format!("{k}: missing"),
                    _ => {}
                }
            }
            "keys differ".into()
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                if v != w {
                    return format!("[{i}].{}", first_difference(v, w));
                }
            }
            format!("{} items vs {}", x.len(), y.len())
        }
        _ => {
            let mut s = format!("{a} vs {b}");
            s.truncate(400);
            s
        }
    }
}
