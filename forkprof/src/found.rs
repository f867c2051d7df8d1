//! Processes found running when tracing starts. Their records start mid-life
//! (`ProcKey::mid_life`): no spawn record names their parent and no exec record their
//! binary, so /proc does (`model::trace::Found`). /proc is read once, right after the
//! programs are attached: a process missing from it was created later, and its spawn record
//! was seen (or, under `--cgroup`, it came into the scope from outside: it is read at first
//! sight). Each label is handed to the trace (and the recording) when its process first
//! appears in a record, so a system-wide trace stores only the processes it saw.
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use forkprof_common::ProcKey;

use crate::decode::Record;
use crate::model::trace::{Found, comm_label};

#[derive(Debug, Default)]
pub struct Snapshot {
    /// By pid, keyed as `ProcKey::mid_life(pid, 0)` until handed out, with when /proc was
    /// read (CLOCK_MONOTONIC): a process that started later is not the one /proc showed
    /// under its pid.
    found: HashMap<u32, (Found, u64)>,
    /// Also read /proc at first sight for a process first seen mid-life that was not in
    /// /proc at the start (`--cgroup`: it entered the scope later, perhaps before the
    /// scope's hooks were attached): the processes read so far.
    late: Option<HashSet<ProcKey>>,
}

impl Snapshot {
    /// Every process in /proc now.
    pub fn all() -> Self {
        let pids = std::fs::read_dir("/proc")
            .map(|dir| {
                dir.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                    .collect::<Vec<u32>>()
            })
            .unwrap_or_default();
        let mut snapshot = Self::default();
        snapshot.add(&pids);
        snapshot
    }

    /// Reads these processes now (those gone already are left out).
    pub fn add(&mut self, pids: &[u32]) {
        let seen: Vec<(u32, Vec<u8>, u32)> = pids
            .iter()
            .filter_map(|&pid| read(pid).map(|(binary, ppid)| (pid, binary, ppid)))
            .collect();
        let labels: HashMap<u32, &[u8]> = seen.iter().map(|(p, b, _)| (*p, &b[..])).collect();
        let found: Vec<Found> = seen
            .iter()
            .map(|(pid, binary, ppid)| Found {
                key: ProcKey::mid_life(*pid, 0),
                binary: binary.clone(),
                parent_binary: match labels.get(ppid) {
                    Some(b) => Some(b.to_vec()),
                    None if *ppid == 0 => None,
                    None => read(*ppid).map(|(b, _)| b),
                },
            })
            .collect();
        let read_ns = crate::session::monotonic_ns();
        self.found
            .extend(found.into_iter().map(|f| (f.key.pid, (f, read_ns))));
    }

    /// The processes of a `--cgroup` scope now (the cgroup directory `dir` and those below
    /// it), and, at first sight, one first seen mid-life that came into it later. Only the
    /// scope's are read at the start: one outside it is read if it comes in.
    pub fn of_scope(dir: &std::path::Path) -> Self {
        let mut snapshot = Self::default();
        snapshot.add(&crate::cgroups::processes_below(dir));
        snapshot.and_late_arrivals()
    }

    /// Also labels, from /proc at first sight, a process first seen mid-life that was not
    /// running at the start: one that entered a `--cgroup` scope from outside.
    pub fn and_late_arrivals(mut self) -> Self {
        self.late = Some(HashSet::new());
        self
    }

    /// The labels of the processes that `record` shows for the first time: each is handed
    /// out once, and only for a process first seen mid-life: /proc's label from the start
    /// for one that started before it was read, and in a scope, /proc's now for one that
    /// came in later (a late arrival that reuses a pid has a label of its own).
    pub fn first_sight(&mut self, record: &Record) -> [Option<Found>; 2] {
        if self.found.is_empty() && self.late.is_none() {
            return [None, None];
        }
        let (own, parent) = match record {
            Record::Spawn(r) => (r.hdr.proc, Some(r.parent)),
            Record::Exec(r) => (r.hdr.proc, None),
            Record::Ld(r) => (r.hdr.proc, None),
            Record::Exit(r) => (r.hdr.proc, None),
        };
        let mut take = |key: ProcKey| {
            if !key.is_mid_life() {
                return None;
            }
            if let Entry::Occupied(read) = self.found.entry(key.pid)
                && key.start_ns < read.get().1
            {
                let (found, _) = read.remove();
                self.late.as_mut().map(|late| late.insert(key));
                return Some(Found { key, ..found });
            }
            // Once per process: gone already, it keeps the [comm] of its exit record.
            let late = self.late.as_mut()?;
            if !late.insert(key) {
                return None;
            }
            let (binary, ppid) = read(key.pid)?;
            Some(Found {
                key,
                binary,
                parent_binary: (ppid != 0).then(|| read(ppid).map(|(b, _)| b)).flatten(),
            })
        };
        [take(own), parent.and_then(take)]
    }
}

/// A process's label (`/proc/PID/exe`, else `[comm]`) and its parent's pid; `None` when it
/// is gone.
fn read(pid: u32) -> Option<(Vec<u8>, u32)> {
    use std::os::unix::ffi::OsStringExt as _;
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so parse after the
    // last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let ppid = std::str::from_utf8(&stat[close + 1..])
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let binary = match std::fs::read_link(format!("/proc/{pid}/exe")) {
        Ok(exe) => exe.into_os_string().into_vec(),
        Err(_) => {
            let comm = std::fs::read(format!("/proc/{pid}/comm")).ok()?;
            comm_label(comm.strip_suffix(b"\n").unwrap_or(&comm))
        }
    };
    Some((binary, ppid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests_support::{exec, key, spawn};

    #[test]
    fn labels_this_process_and_its_parent_from_proc() {
        let me = std::process::id();
        let mut s = Snapshot::default();
        s.add(&[me]);
        let (found, _) = &s.found[&me];
        let exe = std::env::current_exe().unwrap();
        assert_eq!(found.binary, exe.as_os_str().as_encoded_bytes());
        assert!(found.parent_binary.as_ref().is_some_and(|b| !b.is_empty()));
    }

    #[test]
    fn a_label_is_handed_out_once_and_only_for_processes_that_predate_tracing() {
        let mut s = Snapshot::default();
        for pid in [10, 11, 12] {
            let found = Found {
                key: ProcKey::mid_life(pid, 0),
                binary: b"/bin/bash".to_vec(),
                parent_binary: None,
            };
            s.found.insert(pid, (found, 1_000));
        }
        let pre = |pid| ProcKey::mid_life(pid, 500);
        // A process created under tracing that reuses pid 11 is not the one /proc showed.
        assert_eq!(
            s.first_sight(&exec(key(11, 5), 200_000, b"/bin/a", 0, 0)),
            [None, None]
        );
        let [own, parent] = s.first_sight(&spawn(pre(10), key(13, 2_000), 57, 17));
        assert_eq!((own, parent.map(|f| f.key)), (None, Some(pre(10))));
        assert_eq!(
            s.first_sight(&exec(pre(10), 300_000, b"/bin/b", 0, 0)),
            [None, None]
        );
        let [own, _] = s.first_sight(&exec(pre(11), 400_000, b"/bin/c", 0, 0));
        assert_eq!(own.map(|f| f.key), Some(pre(11)));
        // Nor is one first seen mid-life that started after /proc was read (it came into a
        // scope later, with a pid /proc showed another process under).
        assert_eq!(
            s.first_sight(&exec(
                ProcKey::mid_life(12, 1_500),
                500_000,
                b"/bin/d",
                0,
                0
            )),
            [None, None]
        );
    }

    #[test]
    fn a_late_arrival_is_read_from_proc_once_and_only_in_a_scope() {
        let me = std::process::id();
        let record = exec(key(me, 0), 200_000, b"/bin/a", 0, 0);
        // Without a scope, a process that was not running at the start has no label here.
        assert_eq!(Snapshot::default().first_sight(&record), [None, None]);
        let mut s = Snapshot::default().and_late_arrivals();
        let [own, _] = s.first_sight(&record);
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            own.map(|f| f.binary),
            Some(exe.as_os_str().as_encoded_bytes().to_vec())
        );
        assert_eq!(s.first_sight(&record), [None, None], "handed out once");
        // A later process under the same pid, also first seen mid-life, has a label of its
        // own.
        let again = ProcKey::mid_life(me, crate::session::monotonic_ns());
        let [own, _] = s.first_sight(&exec(again, 300_000, b"/bin/a", 0, 0));
        assert_eq!(own.map(|f| f.key), Some(again));
        // One created under tracing has its spawn record: never read from /proc.
        assert_eq!(
            s.first_sight(&exec(key(me + 1, 5), 300_000, b"/bin/b", 0, 0)),
            [None, None]
        );
    }
}
