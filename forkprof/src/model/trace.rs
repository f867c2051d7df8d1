//! Records folded into a process table. Records can arrive out of order across processes (a
//! vfork child's exec reaches the agent before its parent's spawn record), so every record
//! creates its process on first sight, keyed by `ProcKey` (pid + creation time).
use std::collections::HashMap;
use std::sync::Arc;

use forkprof_common::{ExecRecord, LdRecord, ProcKey};
use rustc_hash::FxHashSet;
use serde::Serialize;
use std::hash::{BuildHasherDefault, Hasher};

use super::Method;
use super::method::Spawned;
use super::mounts::Mount;
use crate::decode::{Record, c_bytes};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LostCounts {
    /// Records the kernel could not put in the ring buffer.
    pub ringbuf_full: u64,
    /// Processes or syscalls the kernel could not follow because a state map was full.
    pub state_map_full: u64,
    /// Ring-buffer items the agent could not decode.
    pub undecodable: u64,
    /// Records the recording writer could not store (it stopped: disk full, say). Shown only
    /// when nonzero, so that the JSON of earlier inputs stays as it was.
    #[serde(skip_serializing_if = "is_zero")]
    pub recording_dropped: u64,
    /// Fork-family syscalls and execs of followed 32-bit processes that the syscall hooks in
    /// use did not see (`--ia32-syscalls on-demand` or `never`): neither timed nor followed. Shown only when
    /// nonzero.
    #[serde(skip_serializing_if = "is_zero")]
    pub ia32_unseen: u64,
    /// Processes whose exit the kernel never saw: found when a fork reused the pid their
    /// state still held, so their exit record is missing. Shown only when nonzero.
    #[serde(skip_serializing_if = "is_zero")]
    pub exit_unseen: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LostCounts {
    pub fn total(&self) -> u64 {
        self.ringbuf_full
            + self.state_map_full
            + self.undecodable
            + self.recording_dropped
            + self.ia32_unseen
            + self.exit_unseen
    }
}

/// The interned paths a live session keeps before `Trace::forget_unused_paths` first prunes
/// them.
pub const PATHS_BEFORE_PRUNING: usize = 1024;

/// The cgroup names a live session keeps before `Trace::forget_unused_cgroups` first prunes
/// them.
pub const CGROUPS_BEFORE_PRUNING: usize = 256;

/// Bytes shared by every process that names them (paths repeat across processes).
pub type Shared = Arc<[u8]>;

#[derive(Clone, Debug)]
pub struct ExecAttempt {
    pub ts_ns: u64,
    pub path: Shared,
    /// Empty when arguments were not kept (`--no-args`, or a report that shows none).
    pub args: Vec<Box<[u8]>>,
    pub argc: u32,
    pub errno: i32,
    pub exec_ns: u64,
    pub exec_prepare_ns: u64,
    pub exec_load_ns: u64,
    pub atime_count: u32,
    pub atime_ns: u64,
    pub cow_faults: u64,
    pub cow_fault_ns: u64,
    /// Its cgroup v2 id when the syscall returned (0: not known).
    pub cgroup_id: u64,
}

impl ExecAttempt {
    fn new(r: &ExecRecord, path: Shared, keep_args: bool) -> Self {
        let shown = if keep_args {
            (r.args_read as usize).min(r.args.len())
        } else {
            0
        };
        Self {
            ts_ns: r.hdr.ts_ns,
            path,
            args: r.args[..shown].iter().map(|a| c_bytes(a).into()).collect(),
            argc: r.argc,
            errno: r.errno,
            exec_ns: r.exec_ns,
            exec_prepare_ns: r.exec_prepare_ns,
            exec_load_ns: r.exec_load_ns,
            atime_count: r.atime_count,
            atime_ns: r.atime_ns,
            cow_faults: r.cow_faults,
            cow_fault_ns: r.cow_fault_ns,
            cgroup_id: r.cgroup_id,
        }
    }
}

/// What the model keeps of a dynamic-linker record (the record less its header).
#[derive(Clone, Copy, Debug)]
pub struct Ld {
    /// When the window closed.
    pub ts_ns: u64,
    /// `ld_outcome::*`.
    pub outcome: u32,
    pub openat_count: u32,
    /// The objects ld.so loaded (`LdRecord::objects`).
    pub objects: u32,
    pub ld_start_ns: u64,
    pub ld_map_ns: u64,
    pub ld_reloc_init_ns: u64,
    pub static_start_ns: u64,
    pub atime_count: u32,
    pub atime_ns: u64,
}

impl From<&LdRecord> for Ld {
    fn from(r: &LdRecord) -> Self {
        Self {
            ts_ns: r.hdr.ts_ns,
            outcome: r.outcome,
            openat_count: r.openat_count,
            objects: r.objects,
            ld_start_ns: r.ld_start_ns,
            ld_map_ns: r.ld_map_ns,
            ld_reloc_init_ns: r.ld_reloc_init_ns,
            static_start_ns: r.static_start_ns,
            atime_count: r.atime_count,
            atime_ns: r.atime_ns,
        }
    }
}

/// What the model keeps of a spawn record (the process table can hold millions).
#[derive(Clone, Copy, Debug)]
pub struct Spawn {
    /// Syscall entry in the parent.
    pub start_ns: u64,
    /// Syscall exit in the parent.
    pub ts_ns: u64,
    pub fork_ns: u64,
    pub pagetable_copy_ns: u64,
    pub vfork_wait_ns: u64,
    /// The cgroup v2 id it was created in (its parent's; 0: not known).
    pub cgroup_id: u64,
    pub parent_comm: [u8; forkprof_common::COMM_LEN],
}

/// What the model keeps of an exit record.
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    pub exit_code: u32,
    pub notified: bool,
    /// The task's comm at exit.
    pub comm: [u8; forkprof_common::COMM_LEN],
    pub exit_ns: u64,
    pub exit_teardown_ns: u64,
    pub cow_faults: u64,
    pub cow_fault_ns: u64,
    /// Its cgroup v2 id when its teardown began (0: not known).
    pub cgroup_id: u64,
}

#[derive(Clone, Debug)]
pub struct Process {
    pub key: ProcKey,
    pub parent: Option<ProcKey>,
    /// The parent's binary when the spawn record arrived, if the parent was known then
    /// (what a live view uses once the parent is gone).
    pub inherited: Option<Shared>,
    pub method: Method,
    pub spawn: Option<Spawn>,
    pub execs: Vec<ExecAttempt>,
    pub lds: Vec<Ld>,
    pub exit: Option<Exit>,
    /// `child_run` (ns), from the exec or exit record that closed it; 0: not measured.
    pub child_run_ns: u64,
    /// Threads it created while traced (so that a filtered report counts its own).
    pub threads: u32,
}

impl Process {
    fn new(key: ProcKey) -> Self {
        Self {
            key,
            parent: None,
            inherited: None,
            method: Method::Unknown,
            spawn: None,
            execs: Vec::new(),
            lds: Vec::new(),
            exit: None,
            child_run_ns: 0,
            threads: 0,
        }
    }

    /// When the process was created (its spawn record), else when it was first seen.
    pub fn start_ns(&self) -> u64 {
        self.spawn.map(|s| s.start_ns).unwrap_or(self.key.start_ns)
    }

    /// The cgroup v2 id it counts in: where its last exec attempt returned (a process may be
    /// moved between its fork and its exec), else where it was created, else (seen neither
    /// created nor exec'ing) where it exited; 0 when not known.
    pub fn cgroup_id(&self) -> u64 {
        self.execs
            .iter()
            .rev()
            .map(|e| e.cgroup_id)
            .find(|&id| id != 0)
            .or_else(|| self.spawn.map(|s| s.cgroup_id))
            .or_else(|| self.exit.map(|x| x.cgroup_id))
            .unwrap_or(0)
    }

    /// Every cgroup v2 id its records carry (0 where one was not known).
    pub fn cgroup_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.execs
            .iter()
            .map(|e| e.cgroup_id)
            .chain(self.spawn.map(|s| s.cgroup_id))
            .chain(self.exit.map(|x| x.cgroup_id))
    }

    /// The path of its last successful exec: the binary a process counts as, when it exec'd.
    pub fn last_exec_path(&self) -> Option<&Shared> {
        self.execs
            .iter()
            .rev()
            .find(|e| e.errno == 0)
            .map(|e| &e.path)
    }

    /// How a process none of whose exec attempts succeeded counts: `not found: NAME` when
    /// every attempt failed with ENOENT or ENOTDIR (an execvp PATH search that found nothing),
    /// else `cannot execute: NAME`. NAME is the file name of the last attempt (what execvp
    /// was asked for); the attempts' full paths are in the JSON. `None` when the process made
    /// no attempt, or one succeeded.
    pub fn failed_exec_label(&self) -> Option<Vec<u8>> {
        let last = self.execs.last()?;
        if self.execs.iter().any(|e| e.errno == 0) {
            return None;
        }
        let missing = self
            .execs
            .iter()
            .all(|e| e.errno == libc::ENOENT || e.errno == libc::ENOTDIR);
        let prefix: &[u8] = if missing {
            b"not found: "
        } else {
            b"cannot execute: "
        };
        Some([prefix, file_name(&last.path)].concat())
    }

    /// Path of the last successful exec before `t_ns`.
    pub fn exec_path_before(&self, t_ns: u64) -> Option<&Shared> {
        self.execs
            .iter()
            .rev()
            .find(|e| e.errno == 0 && e.ts_ns <= t_ns)
            .map(|e| &e.path)
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit.map(|x| ExitStatus::from_wait_code(x.exit_code))
    }
}

/// A process's end, decoded from the kernel's wait-status encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    pub fn from_wait_code(code: u32) -> Self {
        match code & 0x7f {
            0 => Self::Code(((code >> 8) & 0xff) as i32),
            sig => Self::Signal(sig as i32),
        }
    }

    /// The shell's convention: the code, or 128 + signal.
    pub fn shell_code(self) -> i32 {
        match self {
            Self::Code(c) => c,
            Self::Signal(s) => 128 + s,
        }
    }
}

/// A process first seen mid-life (`ProcKey::mid_life`: it existed before tracing began, or
/// came into a `--cgroup` scope from outside), as /proc showed it: its records name neither
/// the binary it ran before them nor its parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub key: ProcKey,
    /// `/proc/PID/exe`, else `[comm]` (a kernel thread, or an exe that could not be read).
    pub binary: Vec<u8>,
    /// The same of its parent (`/proc/PID/stat`'s ppid), when known.
    pub parent_binary: Option<Vec<u8>>,
}

/// What the trace keeps of a `Found`.
#[derive(Clone, Debug)]
struct FoundLabels {
    binary: Shared,
    parent_binary: Option<Shared>,
}

#[derive(Debug)]
pub struct Trace {
    /// Every process, in order of first sight; `index` finds one by key.
    pub processes: Vec<Process>,
    index: HashMap<ProcKey, usize, BuildHasherDefault<KeyHasher>>,
    /// The process found last (see `process`).
    hint: usize,
    paths: FxHashSet<Shared>,
    /// `paths`' size after `forget_unused_paths` last pruned it.
    paths_kept: usize,
    /// Keep exec arguments (per-process output needs them; aggregate reports do not).
    pub keep_args: bool,
    pub threads: u64,
    pub failed_spawns: u64,
    /// Spawn records whose child the kernel never saw (`Spawned::ChildUnseen`).
    pub spawns_child_unseen: u64,
    pub lost: LostCounts,
    pub exits_without_notify: u64,
    pub first_ns: Option<u64>,
    pub last_ns: u64,
    /// The process `forkprof run` started.
    pub root: Option<ProcKey>,
    /// The labels of processes first seen mid-life, by key (see `Found`).
    found: HashMap<ProcKey, FoundLabels>,
    /// The recording machine's mounts when tracing began (empty: not known).
    pub mounts: Vec<Mount>,
    /// Cgroup v2 ids -> paths under the cgroup2 mount ("/system.slice/x.service").
    cgroups: HashMap<u64, Shared>,
    /// Cgroup names left by the last `forget_unused_cgroups`.
    cgroups_kept: usize,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            processes: Vec::new(),
            index: HashMap::default(),
            hint: 0,
            paths: FxHashSet::default(),
            paths_kept: 0,
            keep_args: true,
            threads: 0,
            failed_spawns: 0,
            spawns_child_unseen: 0,
            lost: LostCounts::default(),
            exits_without_notify: 0,
            first_ns: None,
            last_ns: 0,
            root: None,
            found: HashMap::new(),
            mounts: Vec::new(),
            cgroups: HashMap::new(),
            cgroups_kept: 0,
        }
    }
}

/// Gives back a vector's room once `in_use` elements need under a quarter of it, down to
/// twice that; room for `ROOM_KEPT` elements is always kept.
pub fn shrink_after_burst<T>(v: &mut Vec<T>, in_use: usize) {
    const ROOM_KEPT: usize = 1024;
    let wanted = in_use.max(ROOM_KEPT);
    if v.capacity() > 4 * wanted {
        v.shrink_to(2 * wanted);
    }
}

impl Trace {
    fn process(&mut self, key: ProcKey) -> &mut Process {
        // Records mostly come in creation order, table by table: try the process after the
        // last one first, which saves a random probe into a table of millions.
        for i in [self.hint + 1, self.hint] {
            if self.processes.get(i).is_some_and(|p| p.key == key) {
                self.hint = i;
                return &mut self.processes[i];
            }
        }
        let next = self.processes.len();
        let i = *self.index.entry(key).or_insert(next);
        if i == next {
            self.processes.push(Process::new(key));
        }
        self.hint = i;
        &mut self.processes[i]
    }

    pub fn get(&self, key: &ProcKey) -> Option<&Process> {
        self.index.get(key).map(|&i| &self.processes[i])
    }

    /// The one shared copy of these bytes.
    pub fn intern(&mut self, bytes: &[u8]) -> Shared {
        if let Some(s) = self.paths.get(bytes) {
            return s.clone();
        }
        let s: Shared = bytes.into();
        self.paths.insert(s.clone());
        s
    }

    /// Forgets the interned paths that nothing else holds any more: the live views call it
    /// after they evict finished processes. Without it a `monitor` that runs for months on
    /// a host whose binaries keep new names (a CI runner's build outputs, each failed
    /// PATH-search candidate) would keep every path it ever saw. A path still named by a
    /// process, a cgroup, a found label or a view's group is kept, as the same shared copy.
    /// Amortized: it prunes only once the set has doubled since it last did.
    pub fn forget_unused_paths(&mut self) {
        if self.paths.len() < self.paths_kept.saturating_mul(2).max(PATHS_BEFORE_PRUNING) {
            return;
        }
        self.paths.retain(|s| Arc::strong_count(s) > 1);
        self.paths_kept = self.paths.len();
    }

    /// Forgets the names of the cgroups that no process held here names, so that a live
    /// session on a host that keeps making cgroups (a CI runner's job each) does not keep
    /// every name it ever saw. The live views evict finished processes with their cgroup's
    /// name resolved (`Finished::cgroup`); a later record of a cgroup forgotten here is
    /// named again when it comes. Amortized as `forget_unused_paths` (run it before that
    /// one, which then frees the paths).
    pub fn forget_unused_cgroups(&mut self) {
        if self.cgroups.len()
            < self
                .cgroups_kept
                .saturating_mul(2)
                .max(CGROUPS_BEFORE_PRUNING)
        {
            return;
        }
        let used: FxHashSet<u64> = self
            .processes
            .iter()
            .flat_map(Process::cgroup_ids)
            .collect();
        self.cgroups.retain(|id, _| used.contains(id));
        self.cgroups_kept = self.cgroups.len();
    }

    /// Interned paths (`intern`): a count, for tests of `forget_unused_paths`.
    pub fn interned_paths(&self) -> usize {
        self.paths.len()
    }

    /// Moves the processes for which `done` is true into `gone`, in table order (the live
    /// views evict finished processes so that memory stays bounded). In place: the table
    /// keeps its capacity from sweep to sweep, where building it anew each time had it grow
    /// again, by reallocation and copy, as the next processes came.
    pub fn take_into(&mut self, mut done: impl FnMut(&Process) -> bool, gone: &mut Vec<Process>) {
        let before = gone.len();
        gone.extend(self.processes.extract_if(.., |p| done(p)));
        if gone.len() > before {
            self.index.clear();
            for (i, p) in self.processes.iter().enumerate() {
                self.index.insert(p.key, i);
            }
        }
        self.hint = 0;
        // After a burst the table's room goes back to twice what it holds, so that a
        // `monitor` does not keep a storm's peak for good.
        let in_use = self.processes.len();
        shrink_after_burst(&mut self.processes, in_use);
    }

    /// Removes and returns the processes for which `done` is true (`take_into`).
    pub fn take(&mut self, done: impl FnMut(&Process) -> bool) -> Vec<Process> {
        let mut gone = Vec::new();
        self.take_into(done, &mut gone);
        gone
    }

    /// Removes one process (the streaming report hands each on once it is complete).
    pub fn remove(&mut self, key: &ProcKey) -> Option<Process> {
        let i = self.index.remove(key)?;
        let p = self.processes.swap_remove(i);
        if let Some(moved) = self.processes.get(i) {
            self.index.insert(moved.key, i);
        }
        self.hint = i.saturating_sub(1);
        Some(p)
    }

    /// Whether a process with this key is in the table.
    pub fn contains(&self, key: &ProcKey) -> bool {
        self.index.contains_key(key)
    }

    /// Room for `n` more processes (a recording knows its size up front).
    pub fn reserve(&mut self, n: usize) {
        self.processes.reserve(n);
        self.index.reserve(n);
    }

    pub fn set_root(&mut self, pid: u32) {
        let key = ProcKey::mid_life(pid, 0);
        self.process(key);
        self.root = Some(key);
    }

    /// Labels a process first seen mid-life (see `Found`).
    pub fn found(&mut self, found: &Found) {
        let labels = FoundLabels {
            binary: self.intern(&found.binary),
            parent_binary: found.parent_binary.as_deref().map(|b| self.intern(b)),
        };
        self.found.insert(found.key, labels);
    }

    /// Names a cgroup v2 id (its path under the cgroup2 mount).
    pub fn cgroup(&mut self, id: u64, path: &[u8]) {
        let path = self.intern(path);
        self.cgroups.insert(id, path);
    }

    /// The processes whose dynamic-linker record the kernel may still hold (it sends one
    /// with the process's exit record): those with a successful exec and no exit yet.
    pub fn running_after_exec(&self) -> impl Iterator<Item = ProcKey> + '_ {
        self.processes
            .iter()
            .filter(|p| p.exit.is_none() && p.execs.iter().any(|e| e.errno == 0))
            .map(|p| p.key)
    }

    /// Whether a cgroup id has a name already.
    pub fn knows_cgroup(&self, id: u64) -> bool {
        self.cgroups.contains_key(&id)
    }

    /// A cgroup's path, if it was named.
    pub fn cgroup_path(&self, id: u64) -> Option<&Shared> {
        self.cgroups.get(&id)
    }

    /// The binary a process first seen mid-life was running then, from /proc.
    pub fn found_binary(&self, key: &ProcKey) -> Option<&Shared> {
        self.found.get(key).map(|f| &f.binary)
    }

    /// The binary of the parent of a process first seen mid-life, from /proc.
    pub fn found_parent_binary(&self, key: &ProcKey) -> Option<&Shared> {
        self.found.get(key)?.parent_binary.as_ref()
    }

    pub fn ingest(&mut self, record: Record) {
        let ts = match &record {
            Record::Spawn(r) => r.hdr.ts_ns,
            Record::Exec(r) => r.hdr.ts_ns,
            Record::Ld(r) => r.hdr.ts_ns,
            Record::Exit(r) => r.hdr.ts_ns,
        };
        self.first_ns = Some(self.first_ns.map_or(ts, |f| f.min(ts)));
        self.last_ns = self.last_ns.max(ts);
        match record {
            Record::Spawn(r) => match Method::spawned(&r) {
                Spawned::Failed => self.failed_spawns += 1,
                Spawned::ChildUnseen => self.spawns_child_unseen += 1,
                Spawned::Thread => {
                    self.threads += 1;
                    // A thread's record is about its process (the creator).
                    if let Some(&i) = self.index.get(&r.hdr.proc) {
                        let p = &mut self.processes[i];
                        p.threads = p.threads.saturating_add(1);
                    }
                }
                Spawned::Process(method) => {
                    let inherited = self
                        .get(&r.parent)
                        .and_then(|parent| {
                            parent
                                .exec_path_before(r.hdr.ts_ns)
                                .cloned()
                                .or_else(|| parent.inherited.clone())
                        })
                        .or_else(|| self.found_binary(&r.parent).cloned());
                    let p = self.process(r.hdr.proc);
                    p.parent = Some(r.parent);
                    p.inherited = inherited;
                    p.method = method;
                    p.spawn = Some(Spawn {
                        start_ns: r.start_ns,
                        ts_ns: r.hdr.ts_ns,
                        fork_ns: r.fork_ns,
                        pagetable_copy_ns: r.pagetable_copy_ns,
                        vfork_wait_ns: r.vfork_wait_ns,
                        cgroup_id: r.cgroup_id,
                        parent_comm: r.parent_comm,
                    });
                }
            },
            Record::Exec(r) => {
                let path = self.intern(c_bytes(&r.path));
                let attempt = ExecAttempt::new(&r, path, self.keep_args);
                let p = self.process(r.hdr.proc);
                p.child_run_ns = p.child_run_ns.saturating_add(r.child_run_ns);
                push_one(&mut p.execs, attempt);
            }
            Record::Ld(r) => push_one(&mut self.process(r.hdr.proc).lds, Ld::from(&r)),
            Record::Exit(r) => {
                if r.notified == 0 {
                    self.exits_without_notify += 1;
                }
                let p = self.process(r.hdr.proc);
                p.child_run_ns = p.child_run_ns.saturating_add(r.child_run_ns);
                p.exit = Some(Exit {
                    exit_code: r.exit_code,
                    notified: r.notified != 0,
                    comm: r.comm,
                    exit_ns: r.exit_ns,
                    exit_teardown_ns: r.exit_teardown_ns,
                    cow_faults: r.cow_faults,
                    cow_fault_ns: r.cow_fault_ns,
                    cgroup_id: r.cgroup_id,
                });
            }
        }
    }

    /// Indices of the processes in creation order.
    pub fn by_start(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.processes.len()).collect();
        v.sort_by_key(|&i| (self.processes[i].start_ns(), self.processes[i].key));
        v
    }

    /// For each process (by index, `order` putting parents before children): its binary
    /// when it was created and its final binary (see `Trace::origin` and
    /// `Trace::last_binary`).
    pub fn binaries(&self, order: &[usize]) -> Vec<Binaries> {
        let mut names = Names::default();
        let origins = self.origins(order, &mut names);
        origins
            .iter()
            .zip(&self.processes)
            .map(|(o, p)| match o {
                Some(o) => Binaries {
                    at_spawn: o.at_spawn.clone(),
                    last: self.last_binary(p, o, &mut names),
                },
                None => Binaries {
                    at_spawn: names.unknown.clone(),
                    last: names.unknown.clone(),
                },
            })
            .collect()
    }

    /// Each process's `Origin` (by index), computed in `order` (parents before children).
    pub fn origins(&self, order: &[usize], names: &mut Names) -> Vec<Option<Origin>> {
        let mut out: Vec<Option<Origin>> = vec![None; self.processes.len()];
        for &i in order {
            let p = &self.processes[i];
            let parent = p
                .parent
                .and_then(|k| self.index.get(&k).copied())
                .and_then(|pi| Some((&self.processes[pi], out[pi].as_ref()?)));
            out[i] = Some(self.origin(p, parent, names));
        }
        out
    }

    /// Where process `p` comes from, given its parent and the parent's origin when the
    /// parent is a process of the trace (`None`: it is not, or `p` has no parent).
    ///
    /// A process not created under tracing has no parent record. The one `forkprof run`
    /// started was created by forkprof (`[forkprof]`). One that existed before tracing began
    /// runs the binary /proc showed then (`Found`), created by its parent's; without that
    /// label (a recording of schema 3 or older) its binary before an exec is not known, and
    /// its children name it by the comm their spawn record saw (`[comm]`).
    pub fn origin(
        &self,
        p: &Process,
        parent: Option<(&Process, &Origin)>,
        names: &mut Names,
    ) -> Origin {
        let (at_spawn, before_exec, ancestry) = match (p.parent, parent) {
            (None, _) if self.root == Some(p.key) => (
                names.forkprof.clone(),
                Some(names.forkprof.clone()),
                names.empty.clone(),
            ),
            (None, _) => match self.found.get(&p.key) {
                Some(f) => (
                    f.parent_binary
                        .clone()
                        .unwrap_or_else(|| names.unknown.clone()),
                    Some(f.binary.clone()),
                    names.empty.clone(),
                ),
                None => (names.unknown.clone(), None, names.empty.clone()),
            },
            (Some(_), Some((pp, po))) => {
                let b = match pp.exec_path_before(p.start_ns()) {
                    Some(path) => path.clone(),
                    None => match &po.before_exec {
                        Some(b) => b.clone(),
                        None => names.label(&parent_comm_label(p)),
                    },
                };
                let ancestry = names.stack(&po.ancestry, &b);
                (b.clone(), Some(b), ancestry)
            }
            (Some(k), None) => {
                let b = match self.found_binary(&k) {
                    Some(b) => b.clone(),
                    None => names.label(&parent_comm_label(p)),
                };
                let ancestry = names.stack(&names.empty.clone(), &b);
                (b.clone(), Some(b), ancestry)
            }
        };
        Origin {
            at_spawn,
            before_exec,
            ancestry,
        }
    }

    /// The binary `p` ran last: its last successful exec; else, when every exec attempt
    /// failed, `not found: NAME`; else the one it was created with (`origin.before_exec`), or
    /// for a process found running whose binary is unknown, its name at exit (`[comm]`),
    /// else `[?]`.
    pub fn last_binary(&self, p: &Process, origin: &Origin, names: &mut Names) -> Shared {
        let before_exec = |names: &mut Names| match &origin.before_exec {
            Some(b) => b.clone(),
            None => match p.exit {
                Some(x) => names.label(&comm_label(&x.comm)),
                None => names.unknown.clone(),
            },
        };
        match p.last_exec_path() {
            Some(path) => path.clone(),
            None if self.found_binary(&p.key).is_some() => before_exec(names),
            None => match p.failed_exec_label() {
                Some(l) => names.label(&l),
                None => before_exec(names),
            },
        }
    }
}

/// Where a process comes from: what it and its children are labelled with.
#[derive(Clone, Debug)]
pub struct Origin {
    /// The binary it was created by (its parent's at the time).
    pub at_spawn: Shared,
    /// The binary it ran before its first exec (what a child created before that exec was
    /// created by); `None` when not known.
    pub before_exec: Option<Shared>,
    /// Its ancestors as flame-graph frames, "root;...;parent": each ancestor as the binary
    /// it was running when it created the next one (empty for a process with no parent).
    pub ancestry: Shared,
}

/// Labels and ancestry stacks, each kept once however many processes name it.
pub struct Names {
    set: FxHashSet<Shared>,
    pub forkprof: Shared,
    pub unknown: Shared,
    pub empty: Shared,
}

impl Default for Names {
    fn default() -> Self {
        let mut n = Self {
            set: FxHashSet::default(),
            forkprof: Shared::from(&b""[..]),
            unknown: Shared::from(&b""[..]),
            empty: Shared::from(&b""[..]),
        };
        n.forkprof = n.label(b"[forkprof]");
        n.unknown = n.label(b"[?]");
        n.empty = n.label(b"");
        n
    }
}

impl Names {
    pub fn label(&mut self, bytes: &[u8]) -> Shared {
        if let Some(s) = self.set.get(bytes) {
            return s.clone();
        }
        let s: Shared = bytes.into();
        self.set.insert(s.clone());
        s
    }

    /// `ancestry;frame(binary)` (just the frame when `ancestry` is empty), of at most
    /// `STACK_FRAMES` frames: past that, the root, `ELIDED_FRAMES` and the nearest
    /// ancestors. A chain of processes each forked by the one before (a daemon that
    /// re-forks itself, a recursive script) would otherwise keep a stack per depth as long
    /// as the depth: memory that grows with its square, from a file that grows linearly.
    pub fn stack(&mut self, ancestry: &[u8], binary: &[u8]) -> Shared {
        let own = frame(binary);
        if ancestry.is_empty() {
            return self.label(&own);
        }
        let mut s = Vec::with_capacity(ancestry.len() + 1 + own.len());
        s.extend_from_slice(ancestry);
        s.push(b';');
        s.extend_from_slice(&own);
        let frames = s.iter().filter(|&&b| b == b';').count() + 1;
        if frames > STACK_FRAMES {
            let mut parts = s.split(|&b| b == b';');
            let root = parts.next().unwrap_or_default();
            let nearest: Vec<&[u8]> = parts.skip(frames - STACK_FRAMES + 1).collect();
            let mut kept = Vec::with_capacity(s.len());
            kept.extend_from_slice(root);
            kept.push(b';');
            kept.extend_from_slice(ELIDED_FRAMES);
            for f in nearest {
                kept.push(b';');
                kept.extend_from_slice(f);
            }
            return self.label(&kept);
        }
        self.label(&s)
    }
}

/// The most frames an ancestry stack keeps (`Names::stack`): deeper than any build's or
/// service's tree, and more than a flame graph can show.
pub const STACK_FRAMES: usize = 64;

/// The frame that stands for the ancestors left out of a stack deeper than `STACK_FRAMES`.
pub const ELIDED_FRAMES: &[u8] = b"[...]";

/// A path's last component (all of it when it has no '/').
pub fn file_name(path: &[u8]) -> &[u8] {
    path.rsplit(|&b| b == b'/').next().unwrap_or(path)
}

/// The last path component, as a flame-graph frame; ';' would split a frame, so it becomes
/// '_'.
pub fn frame(path: &[u8]) -> Vec<u8> {
    file_name(path)
        .iter()
        .map(|&b| if b == b';' { b'_' } else { b })
        .collect()
}

/// Hashes process keys with the splitmix64 finalizer: keys are near-sequential (pids and
/// creation times), which weak multiplicative hashes cluster into long probe sequences.
#[derive(Default)]
pub struct KeyHasher(u64);

fn splitmix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = splitmix64(self.0 ^ u64::from(b));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.0 = splitmix64(self.0 ^ u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = splitmix64(self.0.rotate_left(5) ^ v);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Pushes without Vec's minimum capacity of 4: most processes exec once.
fn push_one<T>(v: &mut Vec<T>, item: T) {
    if v.capacity() == v.len() {
        v.reserve_exact(1);
    }
    v.push(item);
}

/// `[comm]`: how a process whose binary is unknown is named, from a task's comm.
pub fn comm_label(comm: &[u8]) -> Vec<u8> {
    [b"[".as_slice(), c_bytes(comm), b"]"].concat()
}

/// `[comm]` of the parent, from the spawn record, when its binary is unknown.
fn parent_comm_label(p: &Process) -> Vec<u8> {
    p.spawn
        .as_ref()
        .map_or_else(|| b"[?]".to_vec(), |s| comm_label(&s.parent_comm))
}

#[derive(Clone, Debug)]
pub struct Binaries {
    /// The binary the process was running when created (its parent's).
    pub at_spawn: Shared,
    /// The binary the process ran last.
    pub last: Shared,
}
