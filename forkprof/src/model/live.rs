//! Live aggregation for `top` and `monitor`. Records stream in; counters move at once; a
//! process is finished (its phases computed) at the first sweep after its exit record, or,
//! while its parent's spawn record is still to come, once `GRACE_NS` has passed; then it is
//! dropped, so memory is bounded by the processes alive.

use forkprof_common::ProcKey;

use super::Method;
use super::method::Spawned;
use super::phases::Phases;
use super::trace::{Found, Process, Shared, Trace, comm_label};
use crate::decode::Record;

/// How long after its exit a process created under tracing waits for its parent's spawn
/// record: the one record of a process that another task sends, and the only one that can
/// come after its exit record (a vfork parent that is slow to run again after its child
/// exits). Every record a process sends itself comes before its exit record, and the
/// dynamic linker's goes with it.
pub const GRACE_NS: u64 = 1_000_000_000;

/// Counters since start, updated as records arrive.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Processes created, by method.
    pub spawns: [u64; METHODS.len()],
    pub threads: u64,
    pub failed_spawns: u64,
    pub execs_ok: u64,
    pub execs_failed: u64,
    /// Processes forgotten unfinished (`Live::forget_vanished`).
    pub vanished: u64,
}

pub const METHODS: [Method; 5] = Method::PROCESS_SPAWNS;

impl Counters {
    pub fn spawns_total(&self) -> u64 {
        self.spawns.iter().sum()
    }
}

/// A process that has finished, with everything the live views show about it.
#[derive(Clone, Debug)]
pub struct Finished {
    pub binary: Shared,
    pub parent_binary: Shared,
    pub method: Method,
    pub phases: Phases,
    /// Its cgroup v2 id (where it exec'd last, else where it was created, else where it exited;
    /// 0: not known).
    pub cgroup_id: u64,
    /// That cgroup as `report --by cgroup` names it (`cgroup::label`): its path, `cgroup ID`
    /// when it was never named, `?` without an id.
    pub cgroup: Shared,
}

pub struct Live {
    trace: Trace,
    pub counters: Counters,
    unknown: Shared,
    /// The unfinished processes whose pid was gone at the last `forget_vanished`.
    suspects: rustc_hash::FxHashSet<ProcKey>,
    /// The processes a sweep takes, empty between sweeps: kept for its capacity, so that
    /// a sweep does not grow a new one by reallocation and copy each time.
    gone: Vec<Process>,
}

impl Default for Live {
    fn default() -> Self {
        let mut trace = Trace::default();
        trace.keep_args = false;
        let unknown = trace.intern(b"?");
        Self {
            trace,
            counters: Counters::default(),
            unknown,
            suspects: Default::default(),
            gone: Vec::new(),
        }
    }
}

impl Live {
    /// Labels a process that existed before tracing began (see `Found`).
    pub fn found(&mut self, found: &Found) {
        self.trace.found(found);
    }

    /// Names a cgroup v2 id (its path under the cgroup2 mount).
    pub fn cgroup(&mut self, id: u64, path: &[u8]) {
        self.trace.cgroup(id, path);
    }

    /// Whether a cgroup id has a name already.
    pub fn knows_cgroup(&self, id: u64) -> bool {
        self.trace.knows_cgroup(id)
    }

    pub fn ingest(&mut self, record: Record) {
        match &record {
            Record::Spawn(r) => match Method::spawned(r) {
                Spawned::Failed => self.counters.failed_spawns += 1,
                // Its child was never seen: not counted as a spawn of any method.
                Spawned::ChildUnseen => {}
                Spawned::Thread => self.counters.threads += 1,
                Spawned::Process(method) => {
                    if let Some(i) = METHODS.iter().position(|&m| m == method) {
                        self.counters.spawns[i] += 1;
                    }
                }
            },
            Record::Exec(r) if r.errno == 0 => self.counters.execs_ok += 1,
            Record::Exec(_) => self.counters.execs_failed += 1,
            _ => {}
        }
        self.trace.ingest(record);
    }

    /// Processes being followed now.
    pub fn in_flight(&self) -> usize {
        self.trace.processes.len()
    }

    /// Finishes every process that has exited and has all its records: its spawn record was
    /// read, or none is due (it was first seen mid-life: `ProcKey::mid_life`), or `GRACE_NS`
    /// has passed since its exit by `now_ns`. `is_static` tells statically linked binaries
    /// (dynamic-linker phases 0).
    pub fn sweep(&mut self, now_ns: u64, is_static: &dyn Fn(&[u8]) -> bool) -> Vec<Finished> {
        let mut gone = std::mem::take(&mut self.gone);
        self.trace.take_into(
            |p| {
                p.exit.is_some_and(|x| {
                    p.spawn.is_some()
                        || p.key.is_mid_life()
                        || x.exit_ns.saturating_add(GRACE_NS) <= now_ns
                })
            },
            &mut gone,
        );
        let done = gone.iter().map(|p| self.finish(p, is_static)).collect();
        // A storm's room goes back once sweeps take less (emptied first: nothing to move).
        let taken = gone.len();
        gone.clear();
        super::trace::shrink_after_burst(&mut gone, taken);
        self.gone = gone;
        self.trace.forget_unused_cgroups();
        self.trace.forget_unused_paths();
        done
    }

    /// Forgets the unfinished processes whose pid `alive` said was gone at this call and at
    /// the one before (a live session calls it every `VANISH_CHECK_NS`), and returns how
    /// many; `counters.vanished` counts them. Their exit never came: its record was lost
    /// (counted as a lost event where it was lost), or a parent's spawn record came after its child
    /// had finished. Without this a `monitor` would follow them for months, and its
    /// processes-followed gauge would only climb. A pid gone twice, a check apart, leaves
    /// the kernel time to send an exit record it still holds (at the task's free, which RCU
    /// can put off for seconds). A pid taken again by a new process keeps the old one until
    /// that one is gone too: a wait, not an error.
    pub fn forget_vanished(&mut self, alive: &dyn Fn(u32) -> bool) -> usize {
        let suspects = std::mem::take(&mut self.suspects);
        let mut now_gone = rustc_hash::FxHashSet::default();
        let gone = self.trace.take(|p| {
            if p.exit.is_some() || alive(p.key.pid) {
                return false;
            }
            if suspects.contains(&p.key) {
                return true;
            }
            now_gone.insert(p.key);
            false
        });
        self.suspects = now_gone;
        self.counters.vanished += gone.len() as u64;
        gone.len()
    }

    fn finish(&self, p: &Process, is_static: &dyn Fn(&[u8]) -> bool) -> Finished {
        let label = |comm: &[u8]| -> Shared { comm_label(comm).into() };
        let parent_binary = p
            .inherited
            .as_ref()
            .or_else(|| self.trace.found_parent_binary(&p.key))
            .cloned()
            .unwrap_or_else(|| {
                p.spawn
                    .map_or(self.unknown.clone(), |s| label(&s.parent_comm))
            });
        // Its last exec; else, if it predates tracing, what /proc showed it running then;
        // else, when every exec attempt failed, `not found: NAME`; else, if it was created
        // under tracing, its parent's binary; else its own name at exit.
        let binary = p
            .last_exec_path()
            .or_else(|| self.trace.found_binary(&p.key))
            .cloned()
            .or_else(|| p.failed_exec_label().map(Shared::from))
            .or_else(|| p.spawn.map(|_| parent_binary.clone()))
            .or_else(|| p.exit.map(|x| label(&x.comm)))
            .unwrap_or_else(|| self.unknown.clone());
        let exec_ok = p.execs.iter().any(|e| e.errno == 0);
        let phases = Phases::of(p, exec_ok && is_static(&binary));
        Finished {
            binary,
            parent_binary,
            method: p.method,
            phases,
            cgroup_id: p.cgroup_id(),
            cgroup: super::cgroup::label(&self.trace, p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::phases::Phase;
    use crate::model::tests_support::*;

    /// A shell (pid 1) that spawned a child of each pid in `pids`, each exec'ing
    /// /bin/true; those for which `exited` holds have exited.
    fn shell_with_children(pids: std::ops::Range<u32>, exited: impl Fn(u32) -> bool) -> Live {
        let mut live = Live::default();
        let root = key(1, 0);
        live.ingest(exec(root, 500_000, b"/bin/sh", 0, 0));
        for pid in pids {
            let child = key(pid, u64::from(pid) * 1_000_000);
            live.ingest(spawn(root, child, 56, SIGCHLD));
            live.ingest(exec(child, child.start_ns + 1, b"/bin/true", 0, 0));
            if exited(pid) {
                live.ingest(exit(child, 0));
            }
        }
        live
    }

    /// A sweep takes the finished processes out of the table in place, in their order:
    /// the table keeps its room for the next ones (it was built anew, empty, at each sweep,
    /// and grew again by reallocation and copy), and the survivors are still found by key.
    #[test]
    fn a_sweep_keeps_the_table_and_its_room() {
        let mut live = shell_with_children(2..200, |pid| pid % 2 == 0);
        let room = live.trace.processes.capacity();
        let done = live.sweep(0, &|_| false);
        assert_eq!(done.len(), 99);
        assert_eq!(live.in_flight(), 100, "the shell and the odd pids");
        assert_eq!(live.trace.processes.capacity(), room);
        assert!(
            live.gone.is_empty() && live.gone.capacity() >= 99,
            "its room kept"
        );
        let odd = key(3, 3_000_000);
        assert_eq!(live.trace.get(&odd).map(|p| p.key), Some(odd));
        // The next exit finds its process by key, and the next sweep finishes it.
        live.ingest(exit(odd, 0));
        assert_eq!(live.sweep(0, &|_| false).len(), 1);
        assert!(live.trace.get(&odd).is_none());
    }

    /// After a storm the table and the sweep's vector give their room back, down to twice
    /// what they hold (room for 1,024 kept): a `monitor` does not hold a storm's peak for
    /// good.
    #[test]
    fn a_storms_room_is_given_back() {
        let mut live = shell_with_children(2..20_002, |_| true);
        assert!(live.trace.processes.capacity() >= 20_001);
        assert_eq!(live.sweep(0, &|_| false).len(), 20_000);
        assert!(
            live.gone.capacity() >= 20_000,
            "this sweep's take still fits"
        );
        assert!(
            live.trace.processes.capacity() <= 2048,
            "the table's room went back"
        );
        assert_eq!(live.sweep(0, &|_| false).len(), 0);
        assert!(live.gone.capacity() <= 2048, "the sweep's room went back");
    }

    /// A process whose exit never comes (its record lost) and whose pid is gone is
    /// forgotten at the second check that finds it gone, and counted; one whose pid lives,
    /// or that has exited, is not touched.
    #[test]
    fn an_unfinished_process_whose_pid_is_gone_is_forgotten_at_the_second_check() {
        let mut live = Live::default();
        let root = key(1, 0);
        let (lost, running, done) = (key(2, 1_000_000), key(3, 2_000_000), key(4, 3_000_000));
        live.ingest(exec(root, 500_000, b"/bin/sh", 0, 0));
        for child in [lost, running, done] {
            live.ingest(spawn(root, child, 56, SIGCHLD));
            live.ingest(exec(child, child.start_ns + 200_000, b"/bin/cc", 0, 0));
        }
        live.ingest(exit(done, 0));
        let alive = |pid: u32| pid == 1 || pid == 3;
        assert_eq!(live.forget_vanished(&alive), 0, "a first sighting only");
        assert_eq!(live.in_flight(), 4);
        assert_eq!(live.forget_vanished(&alive), 1);
        assert_eq!(live.counters.vanished, 1);
        // The exited one is the sweep's, as before; the living ones stay.
        assert_eq!(live.sweep(0, &|_| false).len(), 1);
        assert_eq!(live.in_flight(), 2);
        // A pid gone at one check and back (taken again) at the next is not forgotten.
        assert_eq!(live.forget_vanished(&|pid| pid == 1), 0);
        assert_eq!(live.forget_vanished(&alive), 0);
        assert_eq!(live.forget_vanished(&alive), 0);
        assert_eq!(live.in_flight(), 2);
    }

    /// A live session forgets the paths of processes it has finished and no view holds: a
    /// host whose binaries all have new names (100,000 here, each once) leaves a bounded
    /// set, where every path used to stay; a path still in use stays, shared.
    #[test]
    fn paths_no_process_or_view_holds_are_forgotten() {
        use crate::model::trace::PATHS_BEFORE_PRUNING;
        let mut live = Live::default();
        let root = key(1, 0);
        live.ingest(exec(root, 500_000, b"/usr/bin/runner", 0, 0));
        let mut most = 0;
        let mut kept_by_a_view = Vec::new();
        for i in 0..100_000u32 {
            let child = key(10 + i, 1_000_000 + u64::from(i));
            let path = format!("/tmp/build-{i}/a.out");
            live.ingest(spawn(root, child, 56, SIGCHLD));
            live.ingest(exec(child, 1_200_000 + u64::from(i), path.as_bytes(), 0, 0));
            live.ingest(exit(child, 0));
            if i % 100 == 0 {
                let done = live.sweep(0, &|_| false);
                // A view that keeps the first one's binary as a group's key.
                if i == 0 {
                    kept_by_a_view.push(done[0].binary.clone());
                }
                most = most.max(live.trace.interned_paths());
            }
        }
        live.sweep(0, &|_| false);
        assert!(
            most <= 2 * PATHS_BEFORE_PRUNING + 200,
            "{most} paths kept at once"
        );
        // Still interned (the same copy), because a view holds it; the runner's too.
        assert_eq!(&*kept_by_a_view[0], b"/tmp/build-0/a.out");
        let again = live.trace.intern(b"/tmp/build-0/a.out");
        assert!(std::sync::Arc::ptr_eq(&again, &kept_by_a_view[0]));
        let runner = live.trace.intern(b"/usr/bin/runner");
        assert_eq!(
            std::sync::Arc::strong_count(&runner),
            3,
            "the root's exec, the set and this"
        );
    }

    #[test]
    fn counts_at_once_and_finishes_at_the_sweep_after_its_exit() {
        let mut live = Live::default();
        let root = key(1, 0);
        let child = key(2, 1_000_000);
        live.ingest(exec(root, 500_000, b"/bin/make", 0, 0));
        live.ingest(spawn(root, child, 56, SIGCHLD));
        live.ingest(exec(child, 1_200_000, b"/bin/cc", 0, 0));
        assert!(live.sweep(GRACE_NS, &|_| false).is_empty(), "none exited");
        live.ingest(exit(child, 0));
        assert_eq!(live.counters.spawns_total(), 1);
        assert_eq!(live.counters.execs_ok, 2);
        assert_eq!(live.in_flight(), 2);
        // Its spawn record came before its exit: finished at once.
        let done = live.sweep(0, &|_| false);
        assert_eq!(done.len(), 1);
        assert_eq!(&*done[0].binary, b"/bin/cc");
        assert_eq!(&*done[0].parent_binary, b"/bin/make");
        assert_eq!(done[0].method, Method::Fork);
        assert!(done[0].phases.get(Phase::SpawnCost).unwrap() > 0);
        assert_eq!(live.in_flight(), 1, "the root has not exited");
    }

    /// A child created under tracing whose exit record comes before its parent's spawn
    /// record (a vfork parent slow to run again) waits for it, at most `GRACE_NS`: then it
    /// has its method and parent; a process that existed before tracing waits for nothing.
    #[test]
    fn a_child_waits_for_a_late_spawn_record_until_the_grace_period_ends() {
        let mut live = Live::default();
        let root = key(1, 0);
        let (late, lost) = (key(2, 1_000_000), key(3, 2_000_000));
        live.ingest(exec(root, 500_000, b"/bin/sh", 0, 0));
        live.ingest(exec(late, 1_200_000, b"/bin/ls", 0, 0));
        live.ingest(exit(late, 0));
        live.ingest(exit(lost, 0));
        assert!(live.sweep(GRACE_NS - 1, &|_| false).is_empty());
        live.ingest(spawn(root, late, 58, SIGCHLD));
        let done = live.sweep(GRACE_NS - 1, &|_| false);
        assert_eq!(done.len(), 1);
        assert_eq!(
            (&*done[0].binary, &*done[0].parent_binary),
            (&b"/bin/ls"[..], &b"/bin/sh"[..])
        );
        assert_eq!(done[0].method, Method::Vfork);
        // Its spawn record lost: finished once the grace period is over (exit_ns is 0).
        assert_eq!(live.sweep(GRACE_NS, &|_| false).len(), 1);
        live.ingest(exit(root, 0));
        assert_eq!(
            live.sweep(0, &|_| false).len(),
            1,
            "the root existed before"
        );
        assert_eq!(live.in_flight(), 0);
    }

    /// `r` with cgroup id `id` (a dynamic-linker record has none).
    fn with_cgroup(mut r: Record, id: u64) -> Record {
        match &mut r {
            Record::Spawn(s) => s.cgroup_id = id,
            Record::Exec(e) => e.cgroup_id = id,
            Record::Exit(x) => x.cgroup_id = id,
            Record::Ld(_) => {}
        }
        r
    }

    /// A finished process carries its cgroup as reports name it: the path of the cgroup it
    /// exec'd in (not the one it was created in), `cgroup ID` for an id never named, and for
    /// one seen only at its exit (it came into a `--cgroup` scope from outside), where it
    /// exited.
    #[test]
    fn finished_processes_carry_their_cgroup() {
        let mut live = Live::default();
        live.cgroup(7, b"/system.slice/a.service");
        assert!(live.knows_cgroup(7) && !live.knows_cgroup(9));
        let root = key(1, 0);
        let (named, unnamed) = (key(2, 1_000_000), key(3, 2_000_000));
        live.ingest(spawn(root, named, 56, SIGCHLD));
        live.ingest(with_cgroup(exec(named, 1_200_000, b"/bin/a", 0, 0), 7));
        live.ingest(with_cgroup(spawn(root, unnamed, 56, SIGCHLD), 7));
        live.ingest(with_cgroup(exec(unnamed, 2_200_000, b"/bin/b", 0, 0), 9));
        live.ingest(exit(named, 0));
        live.ingest(exit(unnamed, 0));
        let late = key(4, 0);
        live.found(&Found {
            key: key(4, 0),
            binary: b"/bin/late".to_vec(),
            parent_binary: None,
        });
        live.ingest(with_cgroup(exit(late, 0), 7));
        let mut done: Vec<(Vec<u8>, u64, Vec<u8>)> = live
            .sweep(GRACE_NS, &|_| false)
            .iter()
            .map(|f| (f.binary.to_vec(), f.cgroup_id, f.cgroup.to_vec()))
            .collect();
        done.sort();
        assert_eq!(
            done,
            vec![
                (b"/bin/a".to_vec(), 7, b"/system.slice/a.service".to_vec()),
                (b"/bin/b".to_vec(), 9, b"cgroup 9".to_vec()),
                (
                    b"/bin/late".to_vec(),
                    7,
                    b"/system.slice/a.service".to_vec()
                ),
            ]
        );
    }

    /// A `monitor` on a host that makes a cgroup per job keeps the names of the cgroups its
    /// running processes are in, not of every job it has seen; a job's processes keep their
    /// cgroup's name when they finish, and a cgroup forgotten is named again when its id
    /// comes back.
    #[test]
    fn names_of_cgroups_no_running_process_is_in_are_forgotten() {
        use super::super::trace::CGROUPS_BEFORE_PRUNING;
        let mut live = Live::default();
        let root = key(1, 0);
        // A long-running process in cgroup 7.
        let daemon = key(2, 1_000);
        live.cgroup(7, b"/system.slice/daemon.service");
        live.ingest(with_cgroup(spawn(root, daemon, 56, SIGCHLD), 7));
        let jobs = 4 * CGROUPS_BEFORE_PRUNING as u32;
        let mut labels = Vec::new();
        for job in 0..jobs {
            let id = 1000 + u64::from(job);
            live.cgroup(id, format!("/ci/job-{job}.scope").as_bytes());
            let k = key(100 + job, 2_000 + u64::from(job));
            live.ingest(with_cgroup(spawn(root, k, 56, SIGCHLD), id));
            live.ingest(exit(k, 0));
            labels.extend(
                live.sweep(GRACE_NS, &|_| false)
                    .into_iter()
                    .map(|f| f.cgroup),
            );
        }
        assert_eq!(labels.len(), jobs as usize);
        for (job, label) in labels.iter().enumerate() {
            assert_eq!(label.as_ref(), format!("/ci/job-{job}.scope").as_bytes());
        }
        assert!(
            live.knows_cgroup(7),
            "the running process's cgroup keeps its name"
        );
        let named = (0..jobs)
            .filter(|job| live.knows_cgroup(1000 + u64::from(*job)))
            .count();
        assert!(
            named < CGROUPS_BEFORE_PRUNING,
            "{named} of {jobs} job cgroups still named"
        );
        assert!(
            !live.knows_cgroup(1000),
            "the first job's cgroup was forgotten"
        );
        live.cgroup(1000, b"/ci/job-0.scope");
        assert!(
            live.knows_cgroup(1000),
            "named again when its id comes back"
        );
    }

    /// top and monitor label a process that existed before tracing from /proc, and its
    /// children's parent too (they were `[comm]` and `?`).
    #[test]
    fn processes_found_running_keep_their_proc_labels() {
        let mut live = Live::default();
        let bash = key(300, 0);
        let child = key(301, 1_000);
        live.found(&Found {
            key: key(300, 0),
            binary: b"/usr/bin/bash".to_vec(),
            parent_binary: Some(b"/usr/sbin/sshd".to_vec()),
        });
        live.ingest(spawn(bash, child, 56, SIGCHLD));
        live.ingest(exit(child, 0));
        live.ingest(exit(bash, 0));
        let done = live.sweep(GRACE_NS, &|_| false);
        let labels: Vec<(&[u8], &[u8])> = done
            .iter()
            .map(|f| (&*f.binary, &*f.parent_binary))
            .collect();
        assert!(
            labels.contains(&(b"/usr/bin/bash", b"/usr/sbin/sshd")),
            "{labels:?}"
        );
        assert!(
            labels.contains(&(b"/usr/bin/bash", b"/usr/bin/bash")),
            "{labels:?}"
        );
    }
}
