//! Decodes the bytes of one ring-buffer item into a typed record. Never panics: a short or
//! unknown item is an error that the collector counts as lost.
use std::fmt;

use forkprof_common::{ExecRecord, ExitRecord, LdRecord, RecordHeader, SpawnRecord, kind};

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
}
