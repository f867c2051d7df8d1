//! Synthetic records for the model's unit tests.
use forkprof_common::{
    ARG_LEN, ARG_SLOTS, COMM_LEN, ExecRecord, ExitRecord, LdRecord, PATH_LEN, ProcKey,
    RecordHeader, SpawnRecord, kind,
};

use crate::decode::Record;

/// A process created at `start_ns`, or, with 0, one first seen mid-life (as a recording
/// stores it).
pub fn key(pid: u32, start_ns: u64) -> ProcKey {
    ProcKey::from_stored(pid, start_ns as i64).unwrap()
}

pub fn hdr(kind: u32, ts_ns: u64, proc: ProcKey) -> RecordHeader {
    RecordHeader {
        kind,
        _pad: 0,
        ts_ns,
        proc,
    }
}

pub fn spawn(parent: ProcKey, child: ProcKey, syscall: u32, flags: u64) -> Record {
    Record::Spawn(SpawnRecord {
        hdr: hdr(kind::SPAWN, child.start_ns + 10, child),
        parent,
        parent_tid: parent.pid,
        child_tid: child.pid,
        clone_flags: flags,
        syscall,
        errno: 0,
        start_ns: child.start_ns - 5,
        fork_ns: 40_000,
        pagetable_copy_ns: 30_000,
        vfork_wait_ns: 0,
        cgroup_id: 0,
        parent_comm: [0; COMM_LEN],
    })
}

pub fn exec(proc: ProcKey, ts: u64, path: &[u8], errno: i32, cow: u64) -> Record {
    let mut rec = ExecRecord {
        hdr: hdr(kind::EXEC, ts, proc),
        tid: proc.pid,
        errno,
        start_ns: ts - 100_000,
        exec_prepare_ns: if errno == 0 { 30_000 } else { 0 },
        exec_load_ns: if errno == 0 { 60_000 } else { 0 },
        exec_ns: if errno == 0 { 100_000 } else { 10_000 },
        atime_count: 1,
        argc: 2,
        atime_ns: 5_000,
        cow_faults: cow,
        cow_fault_ns: 0,
        child_run_ns: 0,
        cgroup_id: 0,
        args_read: 1,
        _pad: 0,
        path: [0; PATH_LEN],
        args: [[0; ARG_LEN]; ARG_SLOTS],
    };
    rec.path[..path.len()].copy_from_slice(path);
    rec.args[0][..path.len().min(ARG_LEN - 1)]
        .copy_from_slice(&path[..path.len().min(ARG_LEN - 1)]);
    Record::Exec(Box::new(rec))
}

pub fn ld(proc: ProcKey, outcome: u32) -> Record {
    Record::Ld(LdRecord {
        hdr: hdr(kind::LD, 0, proc),
        outcome,
        openat_count: 2,
        objects: 1,
        ld_start_ns: 150_000,
        ld_map_ns: 200_000,
        ld_reloc_init_ns: 50_000,
        ..Default::default()
    })
}

pub fn exit(proc: ProcKey, code: u32) -> Record {
    Record::Exit(ExitRecord {
        hdr: hdr(kind::EXIT, 0, proc),
        exit_code: code,
        notified: 1,
        exit_teardown_ns: 20_000,
        cow_faults: 0,
        cow_fault_ns: 0,
        exit_ns: 0,
        child_run_ns: 0,
        cgroup_id: 0,
        comm: [0; COMM_LEN],
    })
}

pub const SIGCHLD: u64 = 17;
