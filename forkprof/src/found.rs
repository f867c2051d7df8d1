//! Processes found running when tracing starts. Their records start mid-life (`start_ns`
//! 0): no spawn record names their parent and no exec record their binary, so /proc does
//! (`model::trace::Found`). /proc is read once, right after the programs are attached: a
//! process missing from it was created later, and its spawn record was seen. Each label is
//! handed to the trace (and the recording) when its process first appears in a record, so
//! a system-wide trace stores only the processes it saw.
use std::collections::{HashMap, HashSet};

use forkprof_common::ProcKey;

use crate::decode::Record;
use crate::model::trace::{Found, comm_label};

#[derive(Debug, Default)]
pub struct Snapshot {
    found: HashMap<u32, Found>,
    /// Also read /proc at first sight for a process first seen mid-life that was not in
    /// /proc at the start (`--cgroup`: it entered the scope later, perhaps before the
    /// scope's hooks were attached): the pids read so far.
    late: Option<HashSet<u32>>,
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
                pid: *pid,
                binary: binary.clone(),
                parent_binary: match labels.get(ppid) {
                    Some(b) => Some(b.to_vec()),
                    None if *ppid == 0 => None,
                    None => read(*ppid).map(|(b, _)| b),
                },
            })
            .collect();
        self.found.extend(found.into_iter().map(|f| (f.pid, f)));
    }

    /// The processes of a `--cgroup` scope now (the cgroup directory `dir` and those below
    /// it), and, at first sight, one first seen mid-life that came into it later. Only the
    /// scope's are read at the start: a label of a process outside it could be handed to a
    /// later arrival that reuses its pid.
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
    /// out once, and only for a process that existed before tracing (`start_ns` 0).
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
            if key.start_ns != 0 {
                return None;
            }
            if let Some(found) = self.found.remove(&key.pid) {
                self.late.as_mut().map(|late| late.insert(key.pid));
                return Some(found);
            }
            // Once per pid: gone already, it keeps the [comm] of its exit record.
            let late = self.late.as_mut()?;
            if !late.insert(key.pid) {
                return None;
            }
            let (binary, ppid) = read(key.pid)?;
            Some(Found {
                pid: key.pid,
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
        let found = &s.found[&me];
        let exe = std::env::current_exe().unwrap();
        assert_eq!(found.binary, exe.as_os_str().as_encoded_bytes());
        assert!(found.parent_binary.as_ref().is_some_and(|b| !b.is_empty()));
    }

    #[test]
    fn a_label_is_handed_out_once_and_only_for_processes_that_predate_tracing() {
        let mut s = Snapshot::default();
        for pid in [10, 11] {
            s.found.insert(
                pid,
                Found {
                    pid,
                    binary: b"/bin/bash".to_vec(),
                    parent_binary: None,
                },
            );
        }
        // A process created under tracing that reuses pid 11 is not the one /proc showed.
        assert_eq!(
            s.first_sight(&exec(key(11, 5), 200_000, b"/bin/a", 0, 0)),
            [None, None]
        );
        let [own, parent] = s.first_sight(&spawn(key(10, 0), key(12, 100), 57, 17));
        assert_eq!((own, parent.map(|f| f.pid)), (None, Some(10)));
        assert_eq!(
            s.first_sight(&exec(key(10, 0), 300_000, b"/bin/b", 0, 0)),
            [None, None]
        );
        let [own, _] = s.first_sight(&exec(key(11, 0), 400_000, b"/bin/c", 0, 0));
        assert_eq!(own.map(|f| f.pid), Some(11));
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
        // One created under tracing has its spawn record: never read from /proc.
        assert_eq!(
            s.first_sight(&exec(key(me + 1, 5), 300_000, b"/bin/b", 0, 0)),
            [None, None]
        );
    }
}
