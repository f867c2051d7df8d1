//! Opening a recording and rebuilding the trace from its rows. Every way a file can be
//! wrong (missing, empty, not SQLite, not forkprof's, newer schema, corrupt) is a
//! `RecordingError` that names the file and the problem; `forkprof report` exits 2 on it.
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use forkprof_common::{
    ARG_LEN, ARG_SLOTS, COMM_LEN, ExecRecord, ExitRecord, LdRecord, PATH_LEN, ProcKey,
    RecordHeader, SpawnRecord, kind,
};
use rusqlite::{Connection, OpenFlags, types::ValueRef};

use super::{RECORDING_SCHEMA, ld_outcome_code};
use crate::decode::Record;
use crate::model::assemble::{Assembler, Sink};
use crate::model::report::{Added, Context, Item, ReportBuilder};
use crate::model::trace::{Binaries, Found, Origin};
use crate::model::{Process, Report, Trace};

#[derive(Debug)]
pub struct RecordingError {
    pub path: PathBuf,
    pub problem: String,
}

impl fmt::Display for RecordingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for RecordingError {}

pub struct Recording {
    path: PathBuf,
    conn: Connection,
    pub meta: BTreeMap<String, String>,
}

fn hdr(kind: u32, ts_ns: u64, proc: ProcKey) -> RecordHeader {
    RecordHeader {
        kind,
        _pad: 0,
        ts_ns,
        proc,
    }
}

/// The process key in a row's columns `pid` and `start_ns` (`ProcKey::stored_start_ns`): a
/// pid below 0 or above u32's range is a corrupt row, refused, not wrapped, and so is a start
/// of `i64::MIN`, which no key is stored as.
fn key_at(r: &rusqlite::Row, pid: usize, start_ns: usize) -> rusqlite::Result<ProcKey> {
    let id = ns(r, pid)?;
    let id = u32::try_from(id).map_err(|_| out_of_range(r, pid, id, "above the largest pid"))?;
    let stored = r.get::<_, i64>(start_ns)?;
    ProcKey::from_stored(id, stored)
        .ok_or_else(|| out_of_range(r, start_ns, stored, "below any start time"))
}

/// Opens a recording without ever writing beside it. A finished recording (or one whose
/// writer was killed after a checkpoint) has no write-ahead log: it is opened immutable, so
/// SQLite creates no -shm or -wal file and a user who may only read it can. A recording with
/// a log (still being written, or killed) needs SQLite's shared memory to read the log's
/// committed batches; if that cannot be created here, the file is read without them, and
/// forkprof says so.
fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let has_log = std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0);
    if has_log {
        let conn = Connection::open_with_flags(path, flags)?;
        match conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(())) {
            Ok(()) => return Ok(conn),
            Err(e) => eprintln!(
                "forkprof: {}: cannot read its write-ahead log ({e}); reading the batches \
                 checkpointed before it",
                path.display()
            ),
        }
    }
    Connection::open_with_flags(immutable_uri(path), flags | OpenFlags::SQLITE_OPEN_URI)
}

/// `file:PATH?immutable=1`, with PATH percent-encoded.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// A TEXT or BLOB column's bytes (paths are stored as either); None for NULL.
fn bytes(value: ValueRef<'_>) -> Option<Vec<u8>> {
    match value {
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(b.to_vec()),
        _ => None,
    }
}

/// TEXT or BLOB column as bytes, copied into a fixed NUL-terminated buffer.
fn fill(buf: &mut [u8], value: ValueRef<'_>) {
    let bytes = match value {
        ValueRef::Text(b) | ValueRef::Blob(b) => b,
        _ => &[],
    };
    let n = bytes.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&bytes[..n]);
}

impl Recording {
    pub fn open(path: &Path) -> Result<Self, RecordingError> {
        let err = |problem: String| RecordingError {
            path: path.to_path_buf(),
            problem,
        };
        let mut header = [0u8; 16];
        let mut file = std::fs::File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
        let n = file
            .read(&mut header)
            .map_err(|e| err(format!("cannot read: {e}")))?;
        if n == 0 {
            return Err(err("empty file, not a forkprof recording".into()));
        }
        if n < 16 || &header != b"SQLite format 3\0" {
            return Err(err(
                "not a forkprof recording (not an SQLite database)".into()
            ));
        }
        let conn = open_read_only(path).map_err(|e| err(format!("cannot open as SQLite: {e}")))?;
        let meta: BTreeMap<String, String> = conn
            .prepare("SELECT key, value FROM meta")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()
            })
            .map_err(|e| match e {
                rusqlite::Error::SqliteFailure(_, Some(ref m)) if m.contains("no such table") => {
                    err("not a forkprof recording (no meta table)".into())
                }
                e => err(format!("corrupt recording: {e}")),
            })?;
        let version: u32 = meta
            .get("schema_version")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| err("not a forkprof recording (no schema_version)".into()))?;
        if version > RECORDING_SCHEMA {
            return Err(err(format!(
                "recorded with schema version {version}, newer than this forkprof reads ({RECORDING_SCHEMA}); upgrade forkprof"
            )));
        }
        Ok(Self {
            path: path.to_path_buf(),
            conn,
            meta,
        })
    }

    /// The schema the file was written with (checked at open).
    fn schema_version(&self) -> u32 {
        self.meta
            .get("schema_version")
            .and_then(|v| v.parse().ok())
            .unwrap_or(RECORDING_SCHEMA)
    }

    fn err(&self, e: rusqlite::Error) -> RecordingError {
        RecordingError {
            path: self.path.clone(),
            problem: format!("corrupt recording: {e}"),
        }
    }

    /// Rebuilds the trace from every stored record. `keep_args`: keep exec arguments (only
    /// per-process output shows them).
    pub fn load(&self, keep_args: bool) -> Result<Trace, RecordingError> {
        let mut trace = Trace::default();
        trace.keep_args = keep_args;
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM spawns", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        trace.reserve(n.max(0) as usize);
        self.for_each_record(&mut |r| trace.ingest(r))
            .map_err(|e| self.err(e))?;
        self.describe(&mut trace)?;
        if let Some(root) = self.root_pid() {
            trace.set_root(root);
        }
        Ok(trace)
    }

    /// The pid of the process `forkprof run` started (a recording of `run`).
    fn root_pid(&self) -> Option<u32> {
        self.meta.get("root_pid").and_then(|v| v.parse().ok())
    }

    /// Puts into `trace` what the recording knows beyond its records: the labels of the
    /// processes found running, the cgroups' names, the lost-record counts and the mounts.
    fn describe(&self, trace: &mut Trace) -> Result<(), RecordingError> {
        for found in self.found().map_err(|e| self.err(e))? {
            trace.found(&found);
        }
        for (id, path) in self.cgroups().map_err(|e| self.err(e))? {
            trace.cgroup(id, &path);
        }
        let num = |k: &str| self.meta.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        trace.lost.ringbuf_full = num("lost_ringbuf_full");
        trace.lost.state_map_full = num("lost_state_map_full");
        trace.lost.undecodable = num("lost_undecodable");
        trace.lost.ia32_unseen = num("lost_ia32_unseen");
        trace.lost.exit_unseen = num("lost_exit_unseen");
        // Schema 4: the recording machine's mounts (the atime hint's advice).
        trace.mounts = self
            .meta
            .get("mounts")
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        Ok(())
    }

    /// The trace a stream of this recording's records starts from: everything but the
    /// records (`describe`), and the process `run` started.
    pub fn stream_start(&self, keep_args: bool) -> Result<Trace, RecordingError> {
        let mut trace = Trace::default();
        trace.keep_args = keep_args;
        self.describe(&mut trace)?;
        if let Some(root) = self.root_pid() {
            trace.set_root(root);
        }
        Ok(trace)
    }

    /// The first and last record timestamps, from a scan of every table (None: no record).
    pub fn span(&self) -> Result<Option<(u64, u64)>, RecordingError> {
        let sql = "SELECT min(t0), max(t1) FROM (
                     SELECT min(ts_ns) AS t0, max(ts_ns) AS t1 FROM spawns
                     UNION ALL SELECT min(ts_ns), max(ts_ns) FROM execs
                     UNION ALL SELECT min(ts_ns), max(ts_ns) FROM lds
                     UNION ALL SELECT min(ts_ns), max(ts_ns) FROM exits)";
        let (a, b): (Option<i64>, Option<i64>) = self
            .conn
            .query_row(sql, [], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.err(e))?;
        Ok(a.zip(b).map(|(a, b)| (a as u64, b as u64)))
    }

    /// Every process of the recording, complete, handed to `sink` one at a time (see
    /// `model::assemble`), starting from `start` (`stream_start`). Returns the trace of what
    /// is kept beyond the processes (threads, lost records, first and last timestamps).
    pub fn processes(
        &self,
        start: Trace,
        keep_args: bool,
        sink: &mut Sink<'_>,
    ) -> anyhow::Result<Trace> {
        let mut assembler = Assembler::new(start);
        self.stream_on_a_thread(keep_args, &mut |r| assembler.ingest(r, sink))?;
        assembler.finish(sink)
    }

    /// The report of `ctx` over every process of the recording, read one at a time as
    /// `processes` reads them, starting from `start`. `each` gets what the report made of
    /// each process it kept, with the process, its binaries and the trace beside it.
    pub fn report(
        &self,
        ctx: &Context<'_>,
        start: Trace,
        keep_args: bool,
        each: &mut dyn FnMut(&Trace, &Process, &Binaries, Added) -> anyhow::Result<()>,
    ) -> anyhow::Result<Report> {
        let mut builder = ReportBuilder::new(ctx);
        let mut sink = |trace: &Trace, p: &Process, bins: &Binaries, origin: &Origin| match builder
            .add(trace, Item::of(p, bins, origin))
        {
            Some(added) => each(trace, p, bins, added),
            None => Ok(()),
        };
        let trace = self.processes(start, keep_args, &mut sink)?;
        Ok(builder.finish(&trace, None))
    }

    /// The tables' records, merged by timestamp, read on a thread of its own (with its own
    /// connection to the file), so that reading rows, which is most of the work, and using
    /// the records take a CPU each: `sink` runs on this thread.
    pub fn stream_on_a_thread(
        &self,
        keep_args: bool,
        sink: &mut dyn FnMut(Record) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        const BATCH: usize = 4096;
        // One reader for all four tables: two readers (two tables each) left the two CPUs
        // of the machine measured with more to do than one reader and the sink (1M
        // processes: 2.7-3.6 s against 2.5 s).
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Record>>(4);
            let path = self.path.clone();
            let reader = scope.spawn(move || -> anyhow::Result<()> {
                let recording = Recording::open(&path)?;
                let mut batch = Vec::with_capacity(BATCH);
                recording.stream_tables(keep_args, &mut |r| {
                    batch.push(r);
                    if batch.len() == BATCH {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                        // The receiver is gone only when the sink failed: stop reading.
                        tx.send(full).map_err(|_| anyhow::anyhow!("stopped"))?;
                    }
                    Ok(())
                })?;
                if !batch.is_empty() {
                    let _ = tx.send(batch);
                }
                Ok(())
            });
            let used = rx.iter().flatten().try_for_each(&mut *sink);
            drop(rx);
            let read = reader
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the reader panicked")));
            // The sink's error comes first: the reader's is then only "stopped".
            used.and(read)
        })
    }

    /// The records of the event tables, merged by timestamp. Each table is read in the
    /// order it was written, which is close to time order (see `model::assemble`).
    /// `keep_args`: read exec arguments.
    fn stream_tables(
        &self,
        keep_args: bool,
        sink: &mut dyn FnMut(Record) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let tables = self.tables(keep_args, true);
        let mut stmts = Vec::with_capacity(tables.len());
        for (sql, _) in &tables {
            stmts.push(self.conn.prepare(sql).map_err(|e| self.err(e))?);
        }
        let mut rows = Vec::with_capacity(stmts.len());
        for st in stmts.iter_mut() {
            rows.push(st.query([]).map_err(|e| self.err(e))?);
        }
        let next =
            |i: usize, rows: &mut Vec<rusqlite::Rows<'_>>| -> anyhow::Result<Option<Record>> {
                match rows[i].next().map_err(|e| self.err(e))? {
                    Some(r) => Ok(Some((tables[i].1)(r).map_err(|e| self.err(e))?)),
                    None => Ok(None),
                }
            };
        let mut heads: Vec<Option<Record>> = Vec::with_capacity(rows.len());
        for i in 0..rows.len() {
            let h = next(i, &mut rows)?;
            heads.push(h);
        }
        loop {
            let Some(i) = heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| Some((record_ts(h.as_ref()?), i)))
                .min()
                .map(|(_, i)| i)
            else {
                return Ok(());
            };
            let record = std::mem::replace(&mut heads[i], next(i, &mut rows)?);
            sink(record.expect("chosen head"))?;
        }
    }

    /// The cgroup ids' paths (schema 5; none before).
    fn cgroups(&self) -> rusqlite::Result<Vec<(u64, Vec<u8>)>> {
        if self.schema_version() < 5 {
            return Ok(Vec::new());
        }
        let mut s = self.conn.prepare("SELECT id, path FROM cgroups")?;
        let rows = s.query_map([], |r| {
            let path = bytes(r.get_ref(1)?).unwrap_or_default();
            Ok((r.get::<_, i64>(0)? as u64, path))
        })?;
        rows.collect()
    }

    /// The labels of the processes first seen mid-life (schema 4; none before, and each
    /// with start_ns 0 before schema 8).
    fn found(&self) -> rusqlite::Result<Vec<Found>> {
        if self.schema_version() < 4 {
            return Ok(Vec::new());
        }
        let start = if self.schema_version() >= 8 {
            "start_ns"
        } else {
            "0"
        };
        let mut s = self.conn.prepare(&format!(
            "SELECT pid, {start}, binary, parent_binary FROM found"
        ))?;
        let rows = s.query_map([], |r| {
            Ok(Found {
                key: key_at(r, 0, 1)?,
                binary: bytes(r.get_ref(2)?).unwrap_or_default(),
                parent_binary: bytes(r.get_ref(3)?),
            })
        })?;
        rows.collect()
    }

    /// Every stored record, table by table (spawns, execs, dynamic-linker windows, exits),
    /// each table in the order it was written.
    pub fn records(&self, f: &mut dyn FnMut(Record)) -> Result<(), RecordingError> {
        self.for_each_record(f).map_err(|e| self.err(e))
    }

    fn for_each_record(&self, sink: &mut dyn FnMut(Record)) -> rusqlite::Result<()> {
        for (sql, convert) in self.tables(true, false) {
            let mut s = self.conn.prepare(&sql)?;
            let mut rows = s.query([])?;
            while let Some(r) = rows.next()? {
                sink(convert(r)?);
            }
        }
        Ok(())
    }

    /// Each event table's query and the record it makes of a row: spawns, execs,
    /// dynamic-linker windows, exits. `keep_args`: read exec arguments. `lean`: leave out
    /// the columns the model does not use (they read as 0), for the streaming report;
    /// `records` reads every column (a recording written again from them is the same).
    fn tables(&self, keep_args: bool, lean: bool) -> Vec<(String, RowToRecord)> {
        // Schema 1 had no static_start_ns and no child_run_ns, schema 2 no cow_fault_ns,
        // schema 4 no cgroup ids, schema 5 none on exits: those read as not measured (0).
        let unused = |column: &'static str| if lean { "0" } else { column };
        let since = |version: u32, column: &'static str| {
            if self.schema_version() >= version {
                column
            } else {
                "0"
            }
        };
        let v2 = |column| since(2, column);
        let v3 = |column| since(3, column);
        let v5 = |column| since(5, column);
        let v6 = |column| since(6, column);
        vec![
            (
                format!(
                    "SELECT pid, start_ns, ts_ns, parent_pid, parent_start_ns, {}, {}, syscall,
                            clone_flags, errno, syscall_start_ns, fork_ns, pagetable_copy_ns,
                            vfork_wait_ns, parent_comm, {} FROM spawns",
                    unused("parent_tid"),
                    unused("child_tid"),
                    v5("cgroup_id")
                ),
                spawn_row as RowToRecord,
            ),
            (
                format!(
                    "SELECT pid, start_ns, ts_ns, {}, path, {}, argc, errno, exec_ns,
                            exec_prepare_ns, exec_load_ns, atime_count, atime_ns, cow_faults,
                            {}, {}, {} FROM execs",
                    unused("tid"),
                    if keep_args { "args" } else { "NULL" },
                    v2("child_run_ns"),
                    v3("cow_fault_ns"),
                    v5("cgroup_id")
                ),
                exec_row,
            ),
            (
                format!(
                    "SELECT pid, start_ns, ts_ns, outcome, openat_count, {}, ld_start_ns,
                            ld_map_ns, ld_reloc_init_ns, atime_count, atime_ns, {}, {} FROM lds",
                    unused("syscalls"),
                    v2("static_start_ns"),
                    // Before schema 7, the objects were the opens less ld.so.cache's.
                    if self.schema_version() >= 7 {
                        "objects"
                    } else {
                        "max(openat_count - 1, 0)"
                    }
                ),
                ld_row,
            ),
            (
                format!(
                    "SELECT pid, start_ns, ts_ns, exit_code, notified, exit_teardown_ns,
                            cow_faults, exit_ns, comm, {}, {}, {} FROM exits",
                    v2("child_run_ns"),
                    v3("cow_fault_ns"),
                    v6("cgroup_id")
                ),
                exit_row,
            ),
        ]
    }
}

/// Makes a record of one row of an event table.
type RowToRecord = fn(&rusqlite::Row) -> rusqlite::Result<Record>;

fn record_ts(r: &Record) -> u64 {
    match r {
        Record::Spawn(r) => r.hdr.ts_ns,
        Record::Exec(r) => r.hdr.ts_ns,
        Record::Ld(r) => r.hdr.ts_ns,
        Record::Exit(r) => r.hdr.ts_ns,
    }
}

fn spawn_row(r: &rusqlite::Row) -> rusqlite::Result<Record> {
    Ok(Record::Spawn(SpawnRecord {
        hdr: header(r, kind::SPAWN)?,
        parent: key_at(r, 3, 4)?,
        parent_tid: r.get(5)?,
        child_tid: r.get(6)?,
        syscall: r.get(7)?,
        clone_flags: ns(r, 8)?,
        errno: r.get(9)?,
        start_ns: ns(r, 10)?,
        fork_ns: ns(r, 11)?,
        pagetable_copy_ns: ns(r, 12)?,
        vfork_wait_ns: ns(r, 13)?,
        cgroup_id: ns(r, 15)?,
        parent_comm: comm(r, 14)?,
    }))
}

fn exec_row(r: &rusqlite::Row) -> rusqlite::Result<Record> {
    let mut rec = ExecRecord {
        hdr: header(r, kind::EXEC)?,
        tid: r.get(3)?,
        errno: r.get(7)?,
        start_ns: 0,
        exec_prepare_ns: ns(r, 9)?,
        exec_load_ns: ns(r, 10)?,
        exec_ns: ns(r, 8)?,
        atime_count: r.get(11)?,
        argc: r.get(6)?,
        atime_ns: ns(r, 12)?,
        cow_faults: ns(r, 13)?,
        child_run_ns: ns(r, 14)?,
        cow_fault_ns: ns(r, 15)?,
        cgroup_id: ns(r, 16)?,
        args_read: 0,
        _pad: 0,
        path: [0; PATH_LEN],
        args: [[0; ARG_LEN]; ARG_SLOTS],
    };
    fill(&mut rec.path, r.get_ref(4)?);
    // NUL-separated; NULL or empty: none (`--no-args`, or none read).
    if let ValueRef::Text(a) | ValueRef::Blob(a) = r.get_ref(5)?
        && !a.is_empty()
    {
        for (slot, arg) in rec.args.iter_mut().zip(a.split(|&b| b == 0)) {
            fill(slot, ValueRef::Blob(arg));
            rec.args_read += 1;
        }
    }
    Ok(Record::Exec(Box::new(rec)))
}

fn ld_row(r: &rusqlite::Row) -> rusqlite::Result<Record> {
    Ok(Record::Ld(LdRecord {
        hdr: header(r, kind::LD)?,
        outcome: ld_outcome_code(&r.get::<_, String>(3)?),
        openat_count: r.get(4)?,
        syscalls: r.get(5)?,
        ld_start_ns: ns(r, 6)?,
        ld_map_ns: ns(r, 7)?,
        ld_reloc_init_ns: ns(r, 8)?,
        atime_count: r.get(9)?,
        atime_ns: ns(r, 10)?,
        static_start_ns: ns(r, 11)?,
        objects: r.get(12)?,
        _pad: 0,
    }))
}

fn exit_row(r: &rusqlite::Row) -> rusqlite::Result<Record> {
    Ok(Record::Exit(ExitRecord {
        hdr: header(r, kind::EXIT)?,
        exit_code: r.get(3)?,
        notified: r.get(4)?,
        exit_teardown_ns: ns(r, 5)?,
        cow_faults: ns(r, 6)?,
        exit_ns: ns(r, 7)?,
        child_run_ns: ns(r, 9)?,
        cow_fault_ns: ns(r, 10)?,
        cgroup_id: ns(r, 11)?,
        comm: comm(r, 8)?,
    }))
}

/// The columns every event table starts with: pid, start_ns, ts_ns.
fn header(r: &rusqlite::Row, kind: u32) -> rusqlite::Result<RecordHeader> {
    Ok(hdr(kind, ns(r, 2)?, key_at(r, 0, 1)?))
}

/// A nanosecond (or other unsigned) column, stored as SQLite's signed integer.
/// A time, duration, count or id column: never negative (the writer stores them from u64s
/// below 2^63). A negative one is a corrupt row, refused rather than read as 2^64 less a
/// little, which made totals of 18446744073 s.
fn ns(r: &rusqlite::Row, i: usize) -> rusqlite::Result<u64> {
    let v = r.get::<_, i64>(i)?;
    u64::try_from(v).map_err(|_| out_of_range(r, i, v, "below 0"))
}

/// The error for column `i` of a row whose integer `v` is out of its range (`why`), naming
/// the column.
fn out_of_range(
    r: &rusqlite::Row,
    i: usize,
    v: impl std::fmt::Display,
    why: &str,
) -> rusqlite::Error {
    let column = r.as_ref().column_name(i).unwrap_or("?").to_string();
    rusqlite::Error::FromSqlConversionFailure(
        i,
        rusqlite::types::Type::Integer,
        format!("{column} is {v}, {why}").into(),
    )
}

/// A comm column, as the kernel's NUL-terminated buffer.
fn comm(r: &rusqlite::Row, i: usize) -> rusqlite::Result<[u8; COMM_LEN]> {
    let mut buf = [0u8; COMM_LEN];
    fill(&mut buf, r.get_ref(i)?);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests_support::{exit, key, spawn};
    use crate::model::trace::Found;
    use crate::recording::Writer;

    /// A recording in a fresh directory `forkprof-reader-TAG-PID`, of `found` and then
    /// `records`, finished: the directory and the file.
    fn written(tag: &str, found: &[Found], records: &[Record]) -> (PathBuf, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("forkprof-reader-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rec.db");
        let writer = Writer::create(&path, None, Vec::new(), true).unwrap();
        for f in found {
            writer.found(f);
        }
        for r in records {
            writer.record(r.clone());
        }
        let trace = Trace::default();
        let report = crate::model::Report::build(
            &trace,
            &crate::model::report::Context::for_run(&|_| false),
        );
        writer.finish(&trace.lost, &report, Vec::new()).unwrap();
        (dir, path)
    }

    /// Schema 4 keeps the labels from /proc of the processes found running, so `report
    /// FILE` labels them as the live report did; a schema 3 recording (no `found` table)
    /// still reads.
    #[test]
    fn found_labels_are_recorded_and_schema_3_still_reads() {
        let (bash, child) = (key(300, 0), key(301, 1_000));
        let (dir, path) = written(
            "found",
            &[Found {
                key: key(300, 0),
                binary: b"/usr/bin/bash".to_vec(),
                parent_binary: Some(b"/usr/sbin/sshd".to_vec()),
            }],
            &[spawn(bash, child, 56, 17), exit(child, 0), exit(bash, 0)],
        );
        let labels = |path: &Path| {
            let t = Recording::open(path).unwrap().load(false).unwrap();
            let b = t.binaries(&t.by_start());
            let i = t.processes.iter().position(|p| p.key == bash).unwrap();
            (b[i].last.to_vec(), b[i].at_spawn.to_vec())
        };
        assert_eq!(
            labels(&path),
            (b"/usr/bin/bash".to_vec(), b"/usr/sbin/sshd".to_vec())
        );
        let v3 = dir.join("v3.db");
        std::fs::copy(&path, &v3).unwrap();
        let conn = Connection::open(&v3).unwrap();
        conn.execute_batch(
            "DROP TABLE found; UPDATE meta SET value = '3' WHERE key = 'schema_version'",
        )
        .unwrap();
        drop(conn);
        let (own, _) = labels(&v3);
        assert_eq!(
            own, b"[]",
            "schema 3: its name at exit, from the exit record"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two processes first seen mid-life under one pid (under `--cgroup`, one that came into
    /// the scope, then a later one under its pid) are two processes, each with its own
    /// label, stored with minus their start times; a schema 7 recording, whose found table
    /// has no `start_ns` and whose mid-life processes are all 0, still reads its labels.
    #[test]
    fn two_processes_first_seen_mid_life_under_one_pid_stay_two() {
        let (first, second) = (ProcKey::mid_life(300, 500), ProcKey::mid_life(300, 900));
        let label = |key, binary: &[u8]| Found {
            key,
            binary: binary.to_vec(),
            parent_binary: None,
        };
        let (dir, path) = written(
            "mid-life",
            &[label(first, b"/bin/a"), label(second, b"/bin/b")],
            &[exit(first, 0), exit(second, 0)],
        );
        let conn = Connection::open(&path).unwrap();
        let stored = |sql: &str| -> Vec<i64> {
            let mut s = conn.prepare(sql).unwrap();
            s.query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        assert_eq!(
            stored("SELECT start_ns FROM exits ORDER BY rowid"),
            [-500, -900]
        );
        assert_eq!(
            stored("SELECT start_ns FROM found ORDER BY start_ns"),
            [-900, -500]
        );
        let labels = |path: &Path| {
            let t = Recording::open(path).unwrap().load(false).unwrap();
            let b = t.binaries(&t.by_start());
            let mut v: Vec<(ProcKey, Vec<u8>)> = t
                .processes
                .iter()
                .zip(b)
                .map(|(p, b)| (p.key, b.last.to_vec()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            labels(&path),
            [(first, b"/bin/a".to_vec()), (second, b"/bin/b".to_vec())]
        );
        let v7 = dir.join("v7.db");
        std::fs::copy(&path, &v7).unwrap();
        drop(conn);
        let conn = Connection::open(&v7).unwrap();
        conn.execute_batch(
            "UPDATE exits SET start_ns = 0 WHERE rowid = 1; DELETE FROM exits WHERE rowid = 2;
             CREATE TABLE v7 (pid INTEGER PRIMARY KEY, binary TEXT NOT NULL, parent_binary TEXT);
             INSERT INTO v7 SELECT pid, binary, parent_binary FROM found WHERE start_ns = -500;
             DROP TABLE found; ALTER TABLE v7 RENAME TO found;
             UPDATE meta SET value = '7' WHERE key = 'schema_version'",
        )
        .unwrap();
        drop(conn);
        assert_eq!(
            labels(&v7),
            [(ProcKey::mid_life(300, 0), b"/bin/a".to_vec())]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A corrupt row's pid, start or time (below 0, or a pid past u32) is refused with its
    /// column named, never wrapped into a pid of 4294967295 or a time 584 years on.
    #[test]
    fn a_corrupt_key_or_time_is_refused_not_wrapped() {
        let (parent, child) = (key(300, 0), key(301, 1_000));
        let (dir, path) = written(
            "key",
            &[],
            &[
                spawn(parent, child, 56, 17),
                exit(child, 0),
                exit(parent, 0),
            ],
        );
        assert!(Recording::open(&path).unwrap().load(false).is_ok());
        for (change, said) in [
            ("UPDATE spawns SET pid = -1", "pid is -1, below 0"),
            (
                "UPDATE spawns SET pid = 4294967296",
                "pid is 4294967296, above",
            ),
            ("UPDATE exits SET ts_ns = -5", "ts_ns is -5, below 0"),
            (
                "UPDATE exits SET start_ns = -9223372036854775808",
                "start_ns is -9223372036854775808, below any start time",
            ),
            (
                "UPDATE spawns SET parent_pid = -2",
                "parent_pid is -2, below 0",
            ),
        ] {
            let bad = dir.join("bad.db");
            std::fs::copy(&path, &bad).unwrap();
            Connection::open(&bad)
                .unwrap()
                .execute_batch(change)
                .unwrap();
            let err = match Recording::open(&bad).unwrap().load(false) {
                Ok(_) => panic!("{change}: read as if whole"),
                Err(e) => format!("{e:#}"),
            };
            assert!(err.contains(said), "{change}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
