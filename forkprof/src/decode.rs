//! Decodes the bytes of one ring-buffer item into a typed record. Never panics: a short or
//! unknown item is an error that the collector counts as lost.
use std::collections::HashMap;
use std::fmt;

use forkprof_common::{
    ExecArgsRecord, ExecEndRecord, ExecRecord, ExitRecord, LdRecord, RecordHeader, SpawnRecord,
    kind,
};

#[derive(Clone, Debug)]
pub enum Record {
    Spawn(SpawnRecord),
    Exec(Box<ExecRecord>),
    Ld(LdRecord),
    Exit(ExitRecord),
}

impl Record {
    /// The cgroup v2 id the record carries (0: none, or not known).
    pub fn cgroup_id(&self) -> u64 {
        match self {
            Record::Spawn(r) => r.cgroup_id,
            Record::Exec(r) => r.cgroup_id,
            Record::Exit(r) => r.cgroup_id,
            Record::Ld(_) => 0,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    Short { kind: u32, len: usize, want: usize },
    UnknownKind(u32),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short { kind, len, want } => {
                write!(f, "record of kind {kind} has {len} bytes, expected {want}")
            }
            Self::UnknownKind(k) => write!(f, "unknown record kind {k}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reads a `T` from the start of `bytes`. `T` must be a plain-old-data record type.
fn read<T: Copy>(bytes: &[u8], kind: u32) -> Result<T, DecodeError> {
    let want = size_of::<T>();
    if bytes.len() < want {
        return Err(DecodeError::Short {
            kind,
            len: bytes.len(),
            want,
        });
    }
    // SAFETY: the length was checked; the record types are repr(C) integers and integer
    // arrays, valid for any bit pattern; read_unaligned has no alignment requirement.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let hdr: RecordHeader = read(bytes, 0)?;
    match hdr.kind {
        kind::SPAWN => read(bytes, hdr.kind).map(Record::Spawn),
        kind::EXEC => read(bytes, hdr.kind).map(|r| Record::Exec(Box::new(r))),
        kind::LD => read(bytes, hdr.kind).map(Record::Ld),
        kind::EXIT => read(bytes, hdr.kind).map(Record::Exit),
        other => Err(DecodeError::UnknownKind(other)),
    }
}

/// One ring-buffer item as the kernel sends it: a record, or one of an exec attempt's two
/// halves, which `ExecJoin` makes into one `Record::Exec`.
#[derive(Clone, Debug)]
pub enum Item {
    Record(Record),
    ExecArgs(Box<ExecArgsRecord>),
    ExecEnd(ExecEndRecord),
}

/// Decodes a ring-buffer item: the kernel's exec halves as well as whole records.
pub fn decode_item(bytes: &[u8]) -> Result<Item, DecodeError> {
    let hdr: RecordHeader = read(bytes, 0)?;
    match hdr.kind {
        kind::EXEC_ARGS => read(bytes, hdr.kind).map(|r| Item::ExecArgs(Box::new(r))),
        kind::EXEC_END => read(bytes, hdr.kind).map(Item::ExecEnd),
        _ => decode(bytes).map(Item::Record),
    }
}

/// Joins each exec attempt's path and argv (sent at sched_process_exec, or at a failed
/// attempt's return just before its end) with its times (sent at its return) into one
/// `ExecRecord`. The ring buffer hands items on in the order they were
/// reserved, so an attempt's args come before its end. An attempt is named by its process
/// and its entry time. Args whose end never came (the ring buffer was full, or another
/// thread's attempt took the window) are forgotten at the process's next attempt's end or at
/// its exit; an end without args (the same) becomes a record with an empty path and no argv,
/// labelled like a process whose exec was not seen.
#[derive(Debug, Default)]
pub struct ExecJoin {
    pending: HashMap<(u32, u64), Box<ExecArgsRecord>>,
}

impl ExecJoin {
    /// The record `item` completes, if any.
    pub fn push(&mut self, item: Item) -> Option<Record> {
        match item {
            Item::Record(record) => {
                if let Record::Exit(e) = &record
                    && !self.pending.is_empty()
                {
                    // Args from after the exit belong to a later process with the same pid.
                    let (pid, at) = (e.hdr.proc.pid, e.hdr.ts_ns);
                    self.pending.retain(|&(p, ts), _| p != pid || ts > at);
                }
                Some(record)
            }
            Item::ExecArgs(args) => {
                self.pending
                    .insert((args.hdr.proc.pid, args.hdr.ts_ns), args);
                None
            }
            Item::ExecEnd(end) => {
                let pid = end.hdr.proc.pid;
                let args = self.pending.remove(&(pid, end.start_ns));
                // The process's earlier attempts whose end was lost: theirs never comes now.
                if !self.pending.is_empty() {
                    self.pending
                        .retain(|&(p, ts), _| p != pid || ts > end.start_ns);
                }
                Some(Record::Exec(Box::new(joined(&end, args.as_deref()))))
            }
        }
    }

    /// Attempts whose end has not come yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

fn joined(end: &ExecEndRecord, args: Option<&ExecArgsRecord>) -> ExecRecord {
    ExecRecord {
        hdr: RecordHeader {
            kind: kind::EXEC,
            ..end.hdr
        },
        tid: end.tid,
        errno: end.errno,
        start_ns: end.start_ns,
        exec_prepare_ns: end.exec_prepare_ns,
        exec_load_ns: end.exec_load_ns,
        exec_ns: end.exec_ns,
        atime_count: end.atime_count,
        argc: args.map_or(0, |a| a.argc),
        atime_ns: end.atime_ns,
        cow_faults: end.cow_faults,
        cow_fault_ns: end.cow_fault_ns,
        child_run_ns: end.child_run_ns,
        cgroup_id: end.cgroup_id,
        path: args.map_or([0; forkprof_common::PATH_LEN], |a| a.path),
        args: args.map_or(
            [[0; forkprof_common::ARG_LEN]; forkprof_common::ARG_SLOTS],
            argv_slots,
        ),
    }
}

/// The first `ARG_SLOTS` strings of a record's argv (NUL-separated, the first `argv_len`
/// bytes), each cut to `ARG_LEN - 1` bytes and NUL-terminated in its slot.
fn argv_slots(a: &ExecArgsRecord) -> [[u8; forkprof_common::ARG_LEN]; forkprof_common::ARG_SLOTS] {
    let mut slots = [[0; forkprof_common::ARG_LEN]; forkprof_common::ARG_SLOTS];
    let len = (a.argv_len as usize).min(a.argv.len());
    let strings = a.argv[..len].split(|&b| b == 0);
    // A trailing NUL leaves an empty piece after the last string: `argc` bounds the count.
    let count = (a.argc as usize).min(forkprof_common::ARG_SLOTS);
    for (slot, arg) in slots.iter_mut().zip(strings).take(count) {
        let n = arg.len().min(forkprof_common::ARG_LEN - 1);
        slot[..n].copy_from_slice(&arg[..n]);
    }
    slots
}

/// The bytes of a record: what the kernel sends (used by tests, fuzzing and replay).
pub fn encode<T: Copy>(record: &T) -> Vec<u8> {
    // SAFETY: `T` is a repr(C) record with explicit padding; all bytes are initialized.
    unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), size_of::<T>()) }
        .to_vec()
}

/// A NUL-terminated byte buffer as bytes (without the NUL).
pub fn c_bytes(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkprof_common::{COMM_LEN, ProcKey};

    fn spawn() -> SpawnRecord {
        SpawnRecord {
            hdr: RecordHeader {
                kind: kind::SPAWN,
                _pad: 0,
                ts_ns: 5,
                proc: ProcKey {
                    start_ns: 4,
                    pid: 42,
                    _pad: 0,
                },
            },
            parent: ProcKey::default(),
            parent_tid: 1,
            child_tid: 42,
            clone_flags: 17,
            syscall: 57,
            errno: 0,
            start_ns: 1,
            fork_ns: 3,
            pagetable_copy_ns: 2,
            vfork_wait_ns: 0,
            cgroup_id: 7,
            parent_comm: [b'x'; COMM_LEN],
        }
    }

    #[test]
    fn round_trips_a_spawn() {
        let Record::Spawn(s) = decode(&encode(&spawn())).unwrap() else {
            panic!("wrong kind")
        };
        assert_eq!((s.hdr.proc.pid, s.fork_ns, s.syscall), (42, 3, 57));
    }

    #[test]
    fn short_and_unknown_are_errors() {
        let bytes = encode(&spawn());
        assert!(matches!(
            decode(&bytes[..40]),
            Err(DecodeError::Short { .. })
        ));
        assert!(matches!(decode(&[1, 2]), Err(DecodeError::Short { .. })));
        let mut bad = bytes.clone();
        bad[0] = 99;
        assert_eq!(decode(&bad).unwrap_err(), DecodeError::UnknownKind(99));
    }

    #[test]
    fn c_bytes_stops_at_nul() {
        assert_eq!(c_bytes(b"ab\0cd"), b"ab");
        assert_eq!(c_bytes(b"abc"), b"abc");
    }

    fn header(kind: u32, pid: u32, ts_ns: u64) -> RecordHeader {
        RecordHeader {
            kind,
            _pad: 0,
            ts_ns,
            proc: ProcKey {
                start_ns: 4,
                pid,
                _pad: 0,
            },
        }
    }

    fn args_record(pid: u32, start_ns: u64, path: &[u8], argv: &[&[u8]]) -> ExecArgsRecord {
        let mut a = ExecArgsRecord {
            hdr: header(kind::EXEC_ARGS, pid, start_ns),
            tid: pid,
            argc: argv.len() as u32,
            path: [0; forkprof_common::PATH_LEN],
            argv_len: 0,
            _pad: 0,
            argv: [0xaa; forkprof_common::ARGV_LEN],
        };
        a.path[..path.len()].copy_from_slice(path);
        let mut off = 0;
        for arg in argv {
            a.argv[off..off + arg.len()].copy_from_slice(arg);
            a.argv[off + arg.len()] = 0;
            off += arg.len() + 1;
        }
        a.argv_len = off as u32;
        a
    }

    fn args(pid: u32, start_ns: u64, path: &[u8]) -> Vec<u8> {
        encode(&args_record(pid, start_ns, path, &[path]))
    }

    #[test]
    fn argv_is_split_into_bounded_slots() {
        let long = [b'x'; 100];
        let argv: [&[u8]; 10] = [b"cc", b"", &long, b"-c", b"a", b"b", b"c", b"d", b"e", b"f"];
        let a = args_record(1, 1, b"/bin/cc", &argv);
        let slots = argv_slots(&a);
        assert_eq!(c_bytes(&slots[0]), b"cc");
        assert_eq!(c_bytes(&slots[1]), b"");
        assert_eq!(c_bytes(&slots[2]), &long[..63]);
        assert_eq!(c_bytes(&slots[3]), b"-c");
        assert_eq!(c_bytes(&slots[7]), b"d");
        // Bytes past `argv_len` (the 0xaa filler) are never read.
        let mut short = args_record(1, 1, b"/bin/sh", &[b"sh", b"-c"]);
        short.argc = 5;
        let slots = argv_slots(&short);
        assert_eq!(c_bytes(&slots[1]), b"-c");
        assert_eq!(slots[2], [0; forkprof_common::ARG_LEN]);
        // A last string cut without its NUL, and a record that says more than it holds.
        short.argv_len = 4;
        assert_eq!(c_bytes(&argv_slots(&short)[1]), b"-");
        short.argv_len = u32::MAX;
        let _ = argv_slots(&short);
    }

    fn end(pid: u32, start_ns: u64, exec_ns: u64) -> Vec<u8> {
        encode(&ExecEndRecord {
            hdr: header(kind::EXEC_END, pid, start_ns + exec_ns),
            tid: pid,
            start_ns,
            exec_ns,
            cgroup_id: 9,
            ..Default::default()
        })
    }

    fn push(join: &mut ExecJoin, bytes: &[u8]) -> Option<Record> {
        join.push(decode_item(bytes).unwrap())
    }

    #[test]
    fn an_exec_attempt_is_its_args_joined_with_its_end() {
        let mut join = ExecJoin::default();
        // Two processes' attempts interleaved, and a second attempt of the first (a PATH
        // search): each end finds its own args by process and entry time.
        assert!(push(&mut join, &args(7, 100, b"/a/sh")).is_none());
        assert!(push(&mut join, &args(8, 150, b"/bin/cc")).is_none());
        let Some(Record::Exec(first)) = push(&mut join, &end(7, 100, 20)) else {
            panic!("no exec record")
        };
        assert!(push(&mut join, &args(7, 130, b"/b/sh")).is_none());
        let Some(Record::Exec(cc)) = push(&mut join, &end(8, 150, 50)) else {
            panic!("no exec record")
        };
        let Some(Record::Exec(second)) = push(&mut join, &end(7, 130, 30)) else {
            panic!("no exec record")
        };
        assert_eq!(first.hdr.kind, kind::EXEC);
        assert_eq!((c_bytes(&first.path), first.exec_ns), (&b"/a/sh"[..], 20));
        assert_eq!(
            (c_bytes(&cc.path), cc.exec_ns, cc.argc),
            (&b"/bin/cc"[..], 50, 1)
        );
        assert_eq!(c_bytes(&cc.args[0]), b"/bin/cc");
        assert_eq!(
            (c_bytes(&second.path), second.cgroup_id),
            (&b"/b/sh"[..], 9)
        );
        assert_eq!(join.pending(), 0);
    }

    #[test]
    fn an_end_without_args_has_no_path_and_lone_args_go_at_exit() {
        let mut join = ExecJoin::default();
        let Some(Record::Exec(e)) = push(&mut join, &end(7, 100, 20)) else {
            panic!("no exec record")
        };
        assert_eq!((c_bytes(&e.path), e.argc, e.exec_ns), (&b""[..], 0, 20));
        assert!(push(&mut join, &args(7, 200, b"/x")).is_none());
        assert!(push(&mut join, &args(8, 200, b"/y")).is_none());
        let exit = ExitRecord {
            hdr: header(kind::EXIT, 7, 300),
            ..Default::default()
        };
        assert!(matches!(
            push(&mut join, &encode(&exit)),
            Some(Record::Exit(_))
        ));
        assert_eq!(
            join.pending(),
            1,
            "only the exited process's args are forgotten"
        );
        // An attempt whose end was lost goes with the next attempt's end; a later process
        // with the same pid keeps its args past the earlier one's exit.
        assert!(push(&mut join, &args(8, 300, b"/z")).is_none());
        assert!(matches!(
            push(&mut join, &end(8, 300, 5)),
            Some(Record::Exec(_))
        ));
        assert_eq!(
            join.pending(),
            0,
            "the lost attempt's args went with the next end"
        );
        assert!(push(&mut join, &args(9, 500, b"/new")).is_none());
        let old_exit = ExitRecord {
            hdr: header(kind::EXIT, 9, 400),
            ..Default::default()
        };
        assert!(push(&mut join, &encode(&old_exit)).is_some());
        assert_eq!(
            join.pending(),
            1,
            "args after the exit are a later process's"
        );
    }

    #[test]
    fn exec_halves_that_are_short_are_errors() {
        let bytes = args(7, 100, b"/x");
        assert!(matches!(
            decode_item(&bytes[..100]),
            Err(DecodeError::Short { .. })
        ));
        assert!(matches!(
            decode_item(&end(7, 1, 2)[..60]),
            Err(DecodeError::Short { .. })
        ));
    }
}
