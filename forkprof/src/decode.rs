//! Decodes the bytes of one ring-buffer item into a typed record. Never panics: a short or
//! unknown item is an error that the collector counts as lost.
use std::fmt;

use forkprof_common::{
    ExecAttemptRecord, ExecRecord, ExitRecord, ExitRecords, LdRecord, PATH_LEN, RecordHeader,
    SpawnRecord, kind, path_walk,
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

/// Whether `bytes` hold a whole `T`; a short item of kind `kind` is an error.
fn whole<T>(bytes: &[u8], kind: u32) -> Result<(), DecodeError> {
    let want = size_of::<T>();
    if bytes.len() < want {
        return Err(DecodeError::Short {
            kind,
            len: bytes.len(),
            want,
        });
    }
    Ok(())
}

/// Reads a `T` from the start of `bytes`. `T` must be a plain-old-data record type.
fn read<T: Copy>(bytes: &[u8], kind: u32) -> Result<T, DecodeError> {
    whole::<T>(bytes, kind)?;
    // SAFETY: the length was checked; the record types are repr(C) integers and integer
    // arrays, valid for any bit pattern; read_unaligned has no alignment requirement.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Calls `f` with the `T` at the start of `bytes`: in place where the bytes are aligned for
/// it, as ring-buffer items are (8 bytes), else a copy. The exec attempt is read so: its
/// path and argv areas are 1,280 of its 1,408 bytes, mostly never written (a short path,
/// no argv under `monitor`), and in place only the bytes used are touched. A copy of the
/// whole record was the largest copy left in the agent's profile, its lines coming from
/// the CPU whose program wrote them (BENCHMARKS.md, "The agent's CPU").
fn with_view<T: Copy, R>(
    bytes: &[u8],
    kind: u32,
    f: impl FnOnce(&T) -> R,
) -> Result<R, DecodeError> {
    whole::<T>(bytes, kind)?;
    if bytes.as_ptr().cast::<T>().is_aligned() {
        // SAFETY: the length and the alignment were checked; the record types are repr(C)
        // integers and integer arrays, valid for any bit pattern; the borrow of `bytes`
        // outlives the reference.
        Ok(f(unsafe { &*bytes.as_ptr().cast::<T>() }))
    } else {
        read(bytes, kind).map(|copy| f(&copy))
    }
}

/// The records of one ring-buffer item: one, or for a process's exit as the kernel sends it
/// (`ExitRecords`), the dynamic-linker record it held back first, if any, then the exit.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// The dynamic-linker record that came with an exit record.
    pub held_ld: Option<LdRecord>,
    pub record: Record,
}

impl IntoIterator for Decoded {
    type Item = Record;
    type IntoIter = std::iter::Chain<std::option::IntoIter<Record>, std::iter::Once<Record>>;

    /// In the order of the events: the window closed before the process exited.
    fn into_iter(self) -> Self::IntoIter {
        self.held_ld
            .map(Record::Ld)
            .into_iter()
            .chain(std::iter::once(self.record))
    }
}

/// Decodes a ring-buffer item: what the kernel sends (an exec attempt as
/// `ExecAttemptRecord`, which becomes a `Record::Exec`; an exit as `ExitRecords`), or a
/// whole `ExecRecord` (kind `EXEC`) or a lone `ExitRecord`, as tests and replays write them.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let hdr: RecordHeader = read(bytes, 0)?;
    if hdr.kind == kind::EXIT && bytes.len() >= size_of::<ExitRecords>() {
        let both: ExitRecords = read(bytes, hdr.kind)?;
        return Ok(Decoded {
            held_ld: (both.ld.hdr.kind == kind::LD).then_some(both.ld),
            record: Record::Exit(both.exit),
        });
    }
    let record = match hdr.kind {
        kind::SPAWN => read(bytes, hdr.kind).map(Record::Spawn),
        kind::EXEC => read(bytes, hdr.kind).map(|r| Record::Exec(Box::new(r))),
        kind::EXEC_ATTEMPT => with_view(bytes, hdr.kind, |a: &ExecAttemptRecord| {
            Record::Exec(Box::new(exec_record(a)))
        }),
        kind::LD => read(bytes, hdr.kind).map(Record::Ld),
        kind::EXIT => read(bytes, hdr.kind).map(Record::Exit),
        other => Err(DecodeError::UnknownKind(other)),
    }?;
    Ok(Decoded {
        held_ld: None,
        record,
    })
}

/// The `ExecRecord` of an attempt as the kernel sent it: its argv split into slots.
fn exec_record(a: &ExecAttemptRecord) -> ExecRecord {
    let (args, args_read) = argv_slots(a);
    ExecRecord {
        hdr: RecordHeader {
            kind: kind::EXEC,
            ..a.hdr
        },
        tid: a.tid,
        errno: a.errno,
        start_ns: a.start_ns,
        exec_prepare_ns: a.exec_prepare_ns,
        exec_load_ns: a.exec_load_ns,
        exec_ns: a.exec_ns,
        atime_count: a.atime_count,
        argc: a.argc,
        atime_ns: a.atime_ns,
        cow_faults: a.cow_faults,
        cow_fault_ns: a.cow_fault_ns,
        child_run_ns: a.child_run_ns,
        cgroup_id: a.cgroup_id,
        args_read,
        _pad: 0,
        path: binary_path(&a.path, a.path_walk),
        args,
    }
}

/// The binary's path: as the exec was given it, or made absolute from the names the kernel
/// walked (forkprof-ebpf's `path` module; `walk` says how). A relative path is the current
/// directory's names, then the path as given, with its `.` and `..` folded; a path naming an
/// open file is the file's own. A walk that stopped short of the root is shown as `…/` and
/// the names it has. What does not fit in `PATH_LEN` bytes is cut at the end, as the kernel
/// cuts a long path as given.
pub fn binary_path(path: &[u8; PATH_LEN], walk: u32) -> [u8; PATH_LEN] {
    let end = ((walk & path_walk::END) as usize).min(PATH_LEN);
    let complete = walk & path_walk::COMPLETE != 0;
    let given = c_bytes(path);
    if walk == 0 {
        // The path as given, and zeros after it: what follows its NUL was not written.
        let mut out = [0; PATH_LEN];
        out[..given.len()].copy_from_slice(given);
        return out;
    }
    let names = path.get(given.len() + 1..end).unwrap_or_default();
    let names = names.strip_suffix(&[0]).unwrap_or(names);
    // The walked names root first (the kernel wrote the last one first), then the path as
    // given where it was relative to them; folded into `kept` on the stack, as the agent
    // decodes every exec: no allocation.
    let walked = (!names.is_empty())
        .then(|| names.rsplit(|&b| b == 0))
        .into_iter()
        .flatten();
    let relative = (walk & path_walk::FROM_CWD != 0)
        .then(|| given.split(|&b| b == b'/'))
        .into_iter()
        .flatten();
    // Each part kept is at least one byte and a separator (a `/` or a NUL), and both areas
    // fit in PATH_LEN - 1 bytes: at most PATH_LEN / 2 parts.
    let mut kept: [&[u8]; PATH_LEN / 2 + 2] = [&[]; PATH_LEN / 2 + 2];
    let mut n = 0;
    for part in walked.chain(relative) {
        match part {
            b"" | b"." => {}
            b".." if n > 0 && kept[n - 1] != b".." => n -= 1,
            // Above the root is the root; above what an incomplete walk has is kept.
            b".." if complete => {}
            _ => {
                kept[n] = part;
                n += 1;
            }
        }
    }
    let mut joined = [0; PATH_LEN];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        let take = bytes.len().min(PATH_LEN - at);
        joined[at..at + take].copy_from_slice(&bytes[..take]);
        at += take;
    };
    put(if complete { b"/" } else { "…/".as_bytes() });
    for (i, part) in kept[..n].iter().enumerate() {
        if i > 0 {
            put(b"/");
        }
        put(part);
    }
    joined
}

/// The first `ARG_SLOTS` strings of a record's argv (NUL-separated, the first `argv_len`
/// bytes), each cut to `ARG_LEN - 1` bytes and NUL-terminated in its slot, and how many
/// there were: a string cut off by the end of the bytes read counts, the strings after it
/// (`argc` says how many) do not.
fn argv_slots(
    a: &ExecAttemptRecord,
) -> (
    [[u8; forkprof_common::ARG_LEN]; forkprof_common::ARG_SLOTS],
    u32,
) {
    let mut slots = [[0; forkprof_common::ARG_LEN]; forkprof_common::ARG_SLOTS];
    let len = (a.argv_len as usize).min(a.argv.len());
    let bytes = &a.argv[..len];
    // A trailing NUL ends the last string read, and leaves no string after it.
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if len == 0 {
        return (slots, 0);
    }
    let count = (a.argc as usize).min(forkprof_common::ARG_SLOTS);
    let mut read = 0;
    for (slot, arg) in slots.iter_mut().zip(bytes.split(|&b| b == 0)).take(count) {
        let n = arg.len().min(forkprof_common::ARG_LEN - 1);
        slot[..n].copy_from_slice(&arg[..n]);
        read += 1;
    }
    (slots, read)
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
                    mid_life: 0,
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
        let Record::Spawn(s) = decode(&encode(&spawn())).unwrap().record else {
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

    /// A process's exit as the kernel sends it: with the dynamic-linker record it held, the
    /// window first (it closed before the exit); without one, the exit alone; a lone exit
    /// record (as tests and replays write them) is read too.
    #[test]
    fn an_exit_brings_the_dynamic_linker_record_it_held() {
        let exit = ExitRecord {
            hdr: header(kind::EXIT, 42, 900),
            exit_code: 3 << 8,
            ..Default::default()
        };
        let ld = LdRecord {
            hdr: header(kind::LD, 42, 500),
            outcome: forkprof_common::ld_outcome::COMPLETE,
            ld_map_ns: 77,
            ..Default::default()
        };
        let kinds = |bytes: &[u8]| -> Vec<(u32, u64)> {
            decode(bytes)
                .unwrap()
                .into_iter()
                .map(|r| match r {
                    Record::Ld(l) => (l.hdr.kind, l.ld_map_ns),
                    Record::Exit(e) => (e.hdr.kind, u64::from(e.exit_code)),
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
        };
        let held = encode(&ExitRecords { exit, ld });
        assert_eq!(kinds(&held), [(kind::LD, 77), (kind::EXIT, 3 << 8)]);
        let none = encode(&ExitRecords {
            exit,
            ld: LdRecord::default(),
        });
        assert_eq!(kinds(&none), [(kind::EXIT, 3 << 8)]);
        assert_eq!(kinds(&encode(&exit)), [(kind::EXIT, 3 << 8)]);
        // Cut inside the held record: the exit alone, as its own length allows.
        assert_eq!(kinds(&held[..held.len() - 1]), [(kind::EXIT, 3 << 8)]);
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
                mid_life: 0,
            },
        }
    }

    fn attempt(pid: u32, start_ns: u64, path: &[u8], argv: &[&[u8]]) -> ExecAttemptRecord {
        let mut a = ExecAttemptRecord {
            hdr: header(kind::EXEC_ATTEMPT, pid, start_ns + 20),
            tid: pid,
            errno: 0,
            start_ns,
            exec_prepare_ns: 5,
            exec_load_ns: 15,
            exec_ns: 20,
            atime_count: 1,
            argc: argv.len() as u32,
            atime_ns: 3,
            cow_faults: 4,
            cow_fault_ns: 6,
            child_run_ns: 7,
            cgroup_id: 9,
            path: [0; forkprof_common::PATH_LEN],
            argv_len: 0,
            path_walk: 0,
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

    #[test]
    fn argv_is_split_into_bounded_slots() {
        let long = [b'x'; 100];
        let argv: [&[u8]; 10] = [b"cc", b"", &long, b"-c", b"a", b"b", b"c", b"d", b"e", b"f"];
        let a = attempt(1, 1, b"/bin/cc", &argv);
        let (slots, read) = argv_slots(&a);
        assert_eq!(read, 8, "the first ARG_SLOTS of 10");
        assert_eq!(c_bytes(&slots[0]), b"cc");
        assert_eq!(c_bytes(&slots[1]), b"");
        assert_eq!(c_bytes(&slots[2]), &long[..63]);
        assert_eq!(c_bytes(&slots[3]), b"-c");
        assert_eq!(c_bytes(&slots[7]), b"d");
        // Bytes past `argv_len` (the 0xaa filler) are never read: a record whose argc says
        // more than its bytes hold has read only what they hold.
        let mut short = attempt(1, 1, b"/bin/sh", &[b"sh", b"-c"]);
        short.argc = 5;
        let (slots, read) = argv_slots(&short);
        assert_eq!(read, 2);
        assert_eq!(c_bytes(&slots[1]), b"-c");
        assert_eq!(slots[2], [0; forkprof_common::ARG_LEN]);
        // A last string cut without its NUL counts, cut.
        short.argv_len = 4;
        let (slots, read) = argv_slots(&short);
        assert_eq!((c_bytes(&slots[1]), read), (&b"-"[..], 2));
        short.argv_len = u32::MAX;
        let _ = argv_slots(&short);
        // None read; and an argv whose first string is empty is still read whole.
        short.argv_len = 0;
        assert_eq!(argv_slots(&short).1, 0);
        let empty_first = attempt(1, 1, b"/bin/echo", &[b"", b"a", b"b"]);
        let (slots, read) = argv_slots(&empty_first);
        assert_eq!(
            (read, c_bytes(&slots[0]), c_bytes(&slots[2])),
            (3, &b""[..], &b"b"[..])
        );
        assert_eq!(argv_slots(&attempt(1, 1, b"/bin/x", &[b""])).1, 1);
    }

    #[test]
    fn an_exec_attempt_becomes_an_exec_record() {
        let bytes = encode(&attempt(7, 100, b"/bin/cc", &[b"cc", b"-c", b"x.c"]));
        let Record::Exec(e) = decode(&bytes).unwrap().record else {
            panic!("wrong kind")
        };
        assert_eq!(e.hdr.kind, kind::EXEC);
        assert_eq!((e.hdr.proc.pid, e.hdr.ts_ns, e.tid), (7, 120, 7));
        assert_eq!(
            (e.start_ns, e.exec_prepare_ns, e.exec_load_ns, e.exec_ns),
            (100, 5, 15, 20)
        );
        assert_eq!(
            (e.atime_count, e.atime_ns, e.cow_faults, e.cow_fault_ns),
            (1, 3, 4, 6)
        );
        assert_eq!((e.child_run_ns, e.cgroup_id, e.errno), (7, 9, 0));
        assert_eq!((c_bytes(&e.path), e.argc), (&b"/bin/cc"[..], 3));
        assert_eq!(c_bytes(&e.args[2]), b"x.c");
        assert_eq!(e.args[3], [0; forkprof_common::ARG_LEN]);
        // Cut short anywhere: an error, counted as lost by the collector.
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(DecodeError::Short { .. })
        ));
    }

    /// Read in place (a ring-buffer item, 8-byte aligned) or copied (bytes at an odd
    /// address), an exec attempt decodes alike; what its path area holds after the path's
    /// NUL, which the kernel did not write, is not carried into the record.
    #[test]
    fn an_exec_attempt_decodes_alike_aligned_or_not() {
        let mut a = attempt(7, 100, b"/bin/cc", &[b"cc", b"-c"]);
        a.path[40..48].copy_from_slice(b"leftover");
        let bytes = encode(&a);
        // u64 words hold it at an aligned address; one byte in, it is not.
        let mut words = vec![0u64; bytes.len() / 8 + 2];
        let buf: &mut [u8] = as_bytes_mut(&mut words);
        buf[..bytes.len()].copy_from_slice(&bytes);
        let aligned = decode(&buf[..bytes.len()]).unwrap().record;
        buf[1..=bytes.len()].copy_from_slice(&bytes);
        let unaligned = decode(&buf[1..=bytes.len()]).unwrap().record;
        for r in [aligned, unaligned] {
            let Record::Exec(e) = r else {
                panic!("wrong kind")
            };
            assert_eq!(c_bytes(&e.path), b"/bin/cc");
            assert!(e.path[7..].iter().all(|&b| b == 0), "nothing after the NUL");
            assert_eq!((e.args_read, c_bytes(&e.args[1])), (2, &b"-c"[..]));
        }
    }

    fn as_bytes_mut(words: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64s are 8 initialized bytes each, and any byte pattern is a valid u64.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
    }

    /// A record's path bytes (the path as given, then the walked names, each with its NUL)
    /// and where the names end.
    fn walked(given: &[u8], names: &[&[u8]]) -> ([u8; PATH_LEN], u32) {
        let mut path = [0xaa; PATH_LEN];
        let mut at = 0;
        for s in std::iter::once(&given).chain(names) {
            path[at..at + s.len()].copy_from_slice(s);
            path[at + s.len()] = 0;
            at += s.len() + 1;
        }
        (path, at as u32)
    }

    fn shown((path, end): ([u8; PATH_LEN], u32), flags: u32) -> String {
        String::from_utf8_lossy(c_bytes(&binary_path(&path, end | flags))).into_owned()
    }

    #[test]
    fn a_walked_path_is_joined_root_first() {
        use path_walk::{COMPLETE, FROM_CWD};
        // Absolute as given: no walk, the bytes after the NUL are never read.
        let (p, _) = walked(b"/usr/bin/cc", &[b"junk"]);
        assert_eq!(shown((p, 0), 0), "/usr/bin/cc");
        // Relative: the current directory (/home/u/src), then the path as given, folded.
        let p = walked(b"./build/../t", &[b"src", b"u", b"home"]);
        assert_eq!(shown(p, FROM_CWD | COMPLETE), "/home/u/src/t");
        let p = walked(b"../../../../bin/x", &[b"src", b"u"]);
        assert_eq!(shown(p, FROM_CWD | COMPLETE), "/bin/x");
        // In the root directory: no names, but complete.
        let p = walked(b"t", &[]);
        assert_eq!(shown(p, FROM_CWD | COMPLETE), "/t");
        // A file descriptor's path is replaced by the file's own.
        let p = walked(b"/dev/fd/3", &[b"true", b"bin", b"usr"]);
        assert_eq!(shown(p, COMPLETE), "/usr/bin/true");
        // A walk cut short keeps what it has, and the `..` above it.
        let p = walked(b"../t", &[b"d", b"c"]);
        assert_eq!(shown(p, FROM_CWD), "…/c/t");
        let p = walked(b"../../../t", &[b"d", b"c"]);
        assert_eq!(shown(p, FROM_CWD), "…/../t");
        // An end past the buffer, or before the path as given: no panic.
        let (p, _) = walked(b"x", &[b"a"]);
        let out = binary_path(&p, 0xffff | FROM_CWD | COMPLETE);
        assert_eq!(c_bytes(&out).len(), PATH_LEN);
        assert_eq!(shown((p, 1), FROM_CWD | COMPLETE), "/x");
        // A join longer than the buffer is cut at PATH_LEN bytes.
        let long = [b'n'; 200];
        let (p, end) = walked(b"./t", &[&long[..125], &long[..125]]);
        let out = binary_path(&p, end | FROM_CWD);
        assert_eq!(c_bytes(&out).len(), PATH_LEN);
    }

    /// The join as it was written first, with vectors: the oracle for the one on the stack.
    fn joined_by_vectors(path: &[u8; PATH_LEN], walk: u32) -> [u8; PATH_LEN] {
        let end = ((walk & path_walk::END) as usize).min(PATH_LEN);
        let complete = walk & path_walk::COMPLETE != 0;
        let given = c_bytes(path);
        let names = path.get(given.len() + 1..end).unwrap_or_default();
        let names = names.strip_suffix(&[0]).unwrap_or(names);
        let mut parts: Vec<&[u8]> = if names.is_empty() {
            Vec::new()
        } else {
            names.split(|&b| b == 0).rev().collect()
        };
        if walk & path_walk::FROM_CWD != 0 {
            parts.extend(given.split(|&b| b == b'/'));
        }
        let mut kept: Vec<&[u8]> = Vec::new();
        for part in parts {
            match part {
                b"" | b"." => {}
                b".." if kept.last().is_some_and(|p| *p != b"..") => {
                    kept.pop();
                }
                b".." if complete => {}
                _ => kept.push(part),
            }
        }
        let mut out = Vec::new();
        out.extend_from_slice(if complete { b"/" } else { "…/".as_bytes() });
        out.extend_from_slice(&kept.join(&b'/'));
        let mut joined = [0; PATH_LEN];
        let n = out.len().min(PATH_LEN);
        joined[..n].copy_from_slice(&out[..n]);
        joined
    }

    /// The most parts a path can keep, 128, fit: one-byte names with a separator each, all
    /// in the path as given, or nearly all in the walked names.
    #[test]
    fn the_most_parts_a_path_can_have_fit() {
        use path_walk::{COMPLETE, FROM_CWD};
        let mut given = [0u8; PATH_LEN];
        for (i, b) in given[..PATH_LEN - 1].iter_mut().enumerate() {
            *b = if i % 2 == 0 { b'a' } else { b'/' };
        }
        let mut names = [0u8; PATH_LEN];
        names[0] = b'a';
        for (i, b) in names[2..].iter_mut().enumerate() {
            *b = if i % 2 == 0 { b'a' } else { 0 };
        }
        for path in [given, names] {
            let walk = PATH_LEN as u32 | FROM_CWD | COMPLETE;
            let out = binary_path(&path, walk);
            assert_eq!(out, joined_by_vectors(&path, walk));
            let parts = c_bytes(&out)
                .split(|&b| b == b'/')
                .filter(|p| !p.is_empty());
            assert_eq!(parts.count(), 128);
        }
    }

    /// 20,000 paths in every walk mode, made of parts from `a`, `bb`, `.`, `..` and empty
    /// ones, short and long, and with ends anywhere: the join on the stack gives what the
    /// one with vectors gave, and never panics.
    #[test]
    fn the_join_on_the_stack_matches_the_join_with_vectors() {
        use path_walk::{COMPLETE, FROM_CWD};
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let vocabulary: [&[u8]; 5] = [b"a", b"bb", b".", b"..", b""];
        for _ in 0..20_000 {
            // The path as given (parts joined by `/`), its NUL, then the names walked,
            // each with its NUL, until the buffer is full.
            let mut bytes = Vec::new();
            for i in 0..next() % 12 {
                if i > 0 {
                    bytes.push(b'/');
                }
                bytes.extend_from_slice(vocabulary[(next() % 5) as usize]);
            }
            let long = next() % 8 == 0;
            while bytes.len() < PATH_LEN {
                bytes.push(0);
                let part = vocabulary[(next() % 4) as usize];
                bytes.extend(part.iter().cycle().take(if long { 40 } else { part.len() }));
            }
            let mut path = [0u8; PATH_LEN];
            path.copy_from_slice(&bytes[..PATH_LEN]);
            let end = (next() % (PATH_LEN as u64 + 8)) as u32;
            let flags = [0, FROM_CWD, COMPLETE, FROM_CWD | COMPLETE][(next() % 4) as usize];
            let walk = end | flags;
            if walk == 0 {
                continue;
            }
            assert_eq!(
                binary_path(&path, walk),
                joined_by_vectors(&path, walk),
                "walk {walk:#x}"
            );
        }
    }
}
