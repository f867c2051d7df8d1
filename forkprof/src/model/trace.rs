//! Records folded into a process table. Records can arrive out of order across processes (a
//! vfork child's exec reaches the agent before its parent's spawn record), so every record
//! creates its process on first sight, keyed by `ProcKey` (pid + creation time).
use std::collections::HashMap;

use forkprof_common::{ExecRecord, ExitRecord, LdRecord, ProcKey, SpawnRecord};
use serde::Serialize;

use super::Method;
use crate::records::{Record, c_bytes};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LostCounts {
    /// Records the kernel could not put in the ring buffer.
    pub ringbuf_full: u64,
    /// Processes or syscalls the kernel could not follow because a state map was full.
    pub state_map_full: u64,
    /// Ring-buffer items the agent could not decode.
    pub undecodable: u64,
}

impl LostCounts {
    pub fn total(&self) -> u64 {
        self.ringbuf_full + self.state_map_full + self.undecodable
    }
}

#[derive(Clone, Debug)]
pub struct ExecAttempt {
    pub ts_ns: u64,
    pub path: Vec<u8>,
    pub args: Vec<Vec<u8>>,
    pub argc: u32,
    pub errno: i32,
    pub exec_ns: u64,
    pub exec_prepare_ns: u64,
    pub exec_load_ns: u64,
    pub atime_count: u32,
    pub atime_ns: u64,
    pub cow_faults: u64,
}

impl From<&ExecRecord> for ExecAttempt {
    fn from(r: &ExecRecord) -> Self {
        // An empty argv[0] slot means the arguments were not recorded (--no-args).
        let shown = if r.args[0][0] == 0 {
            0
        } else {
            (r.argc as usize).min(r.args.len())
        };
        Self {
            ts_ns: r.hdr.ts_ns,
            path: c_bytes(&r.path).to_vec(),
            args: r.args[..shown]
                .iter()
                .map(|a| c_bytes(a).to_vec())
                .collect(),
            argc: r.argc,
            errno: r.errno,
            exec_ns: r.exec_ns,
            exec_prepare_ns: r.exec_prepare_ns,
            exec_load_ns: r.exec_load_ns,
            atime_count: r.atime_count,
            atime_ns: r.atime_ns,
            cow_faults: r.cow_faults,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Process {
    pub key: ProcKey,
    pub parent: Option<ProcKey>,
    pub method: Method,
    pub spawn: Option<SpawnRecord>,
    pub execs: Vec<ExecAttempt>,
    pub lds: Vec<LdRecord>,
    pub exit: Option<ExitRecord>,
}

impl Process {
    fn new(key: ProcKey) -> Self {
        Self {
            key,
            parent: None,
            method: Method::Unknown,
            spawn: None,
            execs: Vec::new(),
            lds: Vec::new(),
            exit: None,
        }
    }

    /// When the process was created (its spawn record), else when it was first seen.
    pub fn start_ns(&self) -> u64 {
        self.spawn.map(|s| s.start_ns).unwrap_or(self.key.start_ns)
    }

    /// Path of the last successful exec before `t_ns`.
    pub fn exec_path_before(&self, t_ns: u64) -> Option<&[u8]> {
        self.execs
            .iter()
            .rev()
            .find(|e| e.errno == 0 && e.ts_ns <= t_ns)
            .map(|e| e.path.as_slice())
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

#[derive(Debug, Default)]
pub struct Trace {
    pub processes: HashMap<ProcKey, Process>,
    pub threads: u64,
    pub failed_spawns: u64,
    pub lost: LostCounts,
    pub exits_without_notify: u64,
    pub first_ns: Option<u64>,
    pub last_ns: u64,
    /// The process `forkprof run` started.
    pub root: Option<ProcKey>,
    /// Successful execs (pid, path) not yet taken by `take_new_execs`, when enabled.
    pub new_execs: Option<Vec<(u32, Vec<u8>)>>,
}

impl Trace {
    fn process(&mut self, key: ProcKey) -> &mut Process {
        self.processes
            .entry(key)
            .or_insert_with(|| Process::new(key))
    }

    pub fn set_root(&mut self, pid: u32) {
        let key = ProcKey {
            start_ns: 0,
            pid,
            _pad: 0,
        };
        self.process(key);
        self.root = Some(key);
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
            Record::Spawn(r) => {
                let method = Method::classify(r.syscall, r.clone_flags);
                if r.errno != 0 {
                    self.failed_spawns += 1;
                } else if method == Method::Thread {
                    self.threads += 1;
                } else {
                    let p = self.process(r.hdr.proc);
                    p.parent = Some(r.parent);
                    p.method = method;
                    p.spawn = Some(r);
                }
            }
            Record::Exec(r) => {
                let attempt = ExecAttempt::from(r.as_ref());
                if let Some(log) = &mut self.new_execs
                    && attempt.errno == 0
                {
                    log.push((r.hdr.proc.pid, attempt.path.clone()));
                }
                self.process(r.hdr.proc).execs.push(attempt);
            }
            Record::Ld(r) => self.process(r.hdr.proc).lds.push(r),
            Record::Exit(r) => {
                if r.notified == 0 {
                    self.exits_without_notify += 1;
                }
                self.process(r.hdr.proc).exit = Some(r);
            }
        }
    }

    /// Processes in creation order.
    pub fn by_start(&self) -> Vec<&Process> {
        let mut v: Vec<&Process> = self.processes.values().collect();
        v.sort_by_key(|p| (p.start_ns(), p.key));
        v
    }

    /// For each process: its binary when it was created (the parent's binary at that time),
    /// and its final binary (its last successful exec, else the one it was created with).
    pub fn binaries(&self) -> HashMap<ProcKey, Binaries> {
        let mut out: HashMap<ProcKey, Binaries> = HashMap::new();
        for p in self.by_start() {
            let at_spawn = match p.parent {
                Some(parent_key) => match self.processes.get(&parent_key) {
                    Some(parent) => parent
                        .exec_path_before(p.start_ns())
                        .map(<[u8]>::to_vec)
                        .or_else(|| out.get(&parent_key).map(|b| b.at_spawn.clone()))
                        .unwrap_or_else(|| comm_label(p)),
                    None => comm_label(p),
                },
                None => b"[forkprof]".to_vec(),
            };
            let last = p
                .execs
                .iter()
                .rev()
                .find(|e| e.errno == 0)
                .map(|e| e.path.clone())
                .unwrap_or_else(|| at_spawn.clone());
            out.insert(p.key, Binaries { at_spawn, last });
        }
        out
    }
}

/// `[comm]` of the parent, from the spawn record, when its binary is unknown.
fn comm_label(p: &Process) -> Vec<u8> {
    let comm = p
        .spawn
        .as_ref()
        .map(|s| c_bytes(&s.parent_comm).to_vec())
        .unwrap_or_else(|| b"?".to_vec());
    [b"[".as_slice(), &comm, b"]"].concat()
}

#[derive(Clone, Debug, Default)]
pub struct Binaries {
    /// The binary the process was running when created (its parent's).
    pub at_spawn: Vec<u8>,
    /// The binary the process ran last.
    pub last: Vec<u8>,
}
