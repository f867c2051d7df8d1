//! The recording writer: a thread of its own that inserts records in batches and commits at
//! least every `COMMIT_EVERY`, so that a SIGKILL loses at most that much.
use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rusqlite::{CachedStatement, Connection, Transaction, params};

use super::Recording;
use super::{RECORDING_SCHEMA, SCHEMA, ld_outcome_name};
use crate::decode::{Record, c_bytes};
use crate::elf::InterpCache;
use crate::model::Method;
use crate::model::report::{Context, ProcessRow, Report};
use crate::model::trace::{ExitStatus, Found, LostCounts};
use crate::privilege::{InvokingUser, as_user, open_private_file};

pub const COMMIT_EVERY: Duration = Duration::from_millis(250);

/// While messages keep coming, the writer reads the clock (to see whether `COMMIT_EVERY`
/// has passed) once per this many records or other messages, not for every one: two clock
/// reads per record were 4% of its time.
const CLOCK_EVERY: usize = 64;

/// Records go to the writer thread in messages of up to this many (`Writer::flush` sends a
/// shorter one after each batch from the ring buffer): one channel operation and one
/// allocation per message rather than per record, and still small enough that the writer
/// sees its clock between two of them.
const RECORDS_PER_MESSAGE: usize = 256;

enum Msg {
    /// Up to `RECORDS_PER_MESSAGE` records, in the order they came.
    Records(Vec<Record>),
    Found(Found),
    Cgroup(u64, Vec<u8>),
    Lost(LostCounts),
    /// Commit what came before, then answer (see `Writer::dropped`).
    Sync(Sender<()>),
    Finish(Box<Finish>),
}

struct Finish {
    meta: Vec<(String, String)>,
    processes: Derived,
}

/// Where the derived `processes` and `phases` tables come from.
enum Derived {
    /// The rows of a report of the whole trace, kept in memory (`run -o`).
    Rows(Vec<ProcessOut>),
    /// The recording itself, read back once its records are committed, one process at a
    /// time as `report` reads it (`record`, which keeps no trace: its memory stays bounded
    /// however many processes it records). The derivation gives up, leaving the file
    /// without those tables, once the flag is set (`record`: Ctrl-C once tracing has stopped).
    FromFile(Arc<AtomicBool>),
}

struct ProcessOut {
    pid: u32,
    start_ns: i64,
    parent_pid: Option<u32>,
    method: &'static str,
    binary: String,
    parent_binary: String,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    phases: Vec<(&'static str, u64)>,
}

pub struct Writer {
    tx: Sender<Msg>,
    /// Records not yet sent to the writer thread (see `RECORDS_PER_MESSAGE`).
    queued: RefCell<Vec<Record>>,
    handle: JoinHandle<Written>,
    /// Records that never reached the file (see `dropped`).
    dropped: Arc<AtomicU64>,
    /// The file, as messages name it.
    shown: String,
}

/// What the writer thread did: the processes in the derived tables, when it finished.
type Written = Result<Option<u64>>;

/// The writer thread's progress: records inserted but not yet committed, and the `Sync`s
/// to answer once they are.
#[derive(Default)]
struct Progress {
    pending: u64,
    acks: Vec<Sender<()>>,
}

impl Progress {
    fn answer(&mut self) {
        for ack in self.acks.drain(..) {
            let _ = ack.send(());
        }
    }
}

/// Bytes as TEXT when they are UTF-8, else as a BLOB: SQLite keeps either per value.
fn text_or_blob(bytes: &[u8]) -> rusqlite::types::Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => rusqlite::types::Value::Text(s.to_string()),
        Err(_) => rusqlite::types::Value::Blob(bytes.to_vec()),
    }
}

/// The insert statements of the event tables, prepared once per transaction rather than
/// looked up in the statement cache for every record.
struct Inserts<'t> {
    spawns: CachedStatement<'t>,
    execs: CachedStatement<'t>,
    lds: CachedStatement<'t>,
    exits: CachedStatement<'t>,
    keep_args: bool,
}

impl<'t> Inserts<'t> {
    fn new(tx: &'t Transaction<'_>, keep_args: bool) -> rusqlite::Result<Self> {
        Ok(Inserts {
            spawns: tx.prepare_cached(
                "INSERT INTO spawns VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)",
            )?,
            execs: tx.prepare_cached(
                "INSERT INTO execs VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)",
            )?,
            lds: tx
                .prepare_cached("INSERT INTO lds VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)")?,
            exits: tx.prepare_cached(
                "INSERT INTO exits VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
            )?,
            keep_args,
        })
    }

    fn insert(&mut self, record: &Record) -> rusqlite::Result<()> {
        match record {
            Record::Spawn(r) => {
                let method = Method::classify(r.syscall, r.clone_flags).name();
                self.spawns.execute(params![
                    r.hdr.proc.pid,
                    r.hdr.proc.stored_start_ns(),
                    r.hdr.ts_ns as i64,
                    r.parent.pid,
                    r.parent.stored_start_ns(),
                    r.parent_tid,
                    r.child_tid,
                    method,
                    r.syscall,
                    r.clone_flags as i64,
                    r.errno,
                    r.start_ns as i64,
                    r.fork_ns as i64,
                    r.pagetable_copy_ns as i64,
                    r.vfork_wait_ns as i64,
                    text_or_blob(c_bytes(&r.parent_comm)),
                    r.cgroup_id as i64,
                ])?;
            }
            Record::Exec(r) => {
                // NULL when none was read. (So an argv of one empty string reads back as none,
                // as in recordings written before `args_read`.)
                let shown = (r.args_read as usize).min(r.args.len());
                let args = (self.keep_args && shown > 0).then(|| {
                    r.args[..shown]
                        .iter()
                        .map(|a| c_bytes(a))
                        .collect::<Vec<_>>()
                        .join(&0u8)
                });
                self.execs.execute(params![
                    r.hdr.proc.pid,
                    r.hdr.proc.stored_start_ns(),
                    r.hdr.ts_ns as i64,
                    r.tid,
                    text_or_blob(c_bytes(&r.path)),
                    args.map(|a| text_or_blob(&a)),
                    r.argc,
                    r.errno,
                    r.exec_ns as i64,
                    r.exec_prepare_ns as i64,
                    r.exec_load_ns as i64,
                    r.atime_count,
                    r.atime_ns as i64,
                    r.cow_faults as i64,
                    r.child_run_ns as i64,
                    r.cow_fault_ns as i64,
                    r.cgroup_id as i64,
                ])?;
            }
            Record::Ld(r) => {
                self.lds.execute(params![
                    r.hdr.proc.pid,
                    r.hdr.proc.stored_start_ns(),
                    r.hdr.ts_ns as i64,
                    ld_outcome_name(r.outcome),
                    r.openat_count,
                    r.syscalls,
                    r.ld_start_ns as i64,
                    r.ld_map_ns as i64,
                    r.ld_reloc_init_ns as i64,
                    r.atime_count,
                    r.atime_ns as i64,
                    r.static_start_ns as i64,
                    r.objects,
                ])?;
            }
            Record::Exit(r) => {
                self.exits.execute(params![
                    r.hdr.proc.pid,
                    r.hdr.proc.stored_start_ns(),
                    r.hdr.ts_ns as i64,
                    r.exit_code,
                    r.notified,
                    r.exit_teardown_ns as i64,
                    r.cow_faults as i64,
                    r.exit_ns as i64,
                    text_or_blob(c_bytes(&r.comm)),
                    r.child_run_ns as i64,
                    r.cow_fault_ns as i64,
                    r.cgroup_id as i64,
                ])?;
            }
        }
        Ok(())
    }
}

impl ProcessOut {
    fn of(p: &ProcessRow) -> Self {
        ProcessOut {
            pid: p.pid,
            start_ns: p.start_ns,
            parent_pid: p.parent_pid,
            method: p.method.name(),
            binary: p.binary.clone(),
            parent_binary: p.parent_binary.clone(),
            exit_code: match p.exit {
                Some(ExitStatus::Code(c)) => Some(c),
                _ => None,
            },
            exit_signal: match p.exit {
                Some(ExitStatus::Signal(s)) => Some(s),
                _ => None,
            },
            phases: p
                .phases
                .iter_by_name()
                .map(|(k, v)| (k.name(), *v))
                .collect(),
        }
    }
}

/// The insert statements of the derived tables.
struct DerivedInserts<'t> {
    processes: rusqlite::Statement<'t>,
    phases: rusqlite::Statement<'t>,
}

impl<'t> DerivedInserts<'t> {
    fn new(tx: &'t Transaction<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            processes: tx
                .prepare("INSERT OR REPLACE INTO processes VALUES (?1,?2,?3,?4,?5,?6,?7,?8)")?,
            phases: tx.prepare("INSERT INTO phases VALUES (?1,?2,?3,?4)")?,
        })
    }

    fn insert(&mut self, row: &ProcessOut) -> rusqlite::Result<()> {
        self.processes.execute(params![
            row.pid,
            row.start_ns,
            row.parent_pid,
            row.method,
            row.binary,
            row.parent_binary,
            row.exit_code,
            row.exit_signal,
        ])?;
        for (name, value) in &row.phases {
            self.phases
                .execute(params![row.pid, row.start_ns, name, *value as i64])?;
        }
        Ok(())
    }
}

/// Inserts the derived rows of every process of the recording at `path`, read back from
/// its committed records one process at a time (`Recording::processes`, as `report` reads
/// it), into `tx`; returns how many. The rows are built as `run`'s are (`Context::for_run`),
/// so they are those `run -o` derives from the trace in memory.
fn derive_from_file(tx: &Transaction<'_>, path: &Path, give_up: &dyn Fn() -> bool) -> Result<u64> {
    let recording = Recording::open(path)?;
    let start = recording.stream_start(false)?;
    let loaders = InterpCache::default();
    let is_static = |p: &[u8]| loaders.is_static(p);
    let mut inserts = DerivedInserts::new(tx)?;
    let mut n = 0u64;
    // The rows alone: no groups, whose memory would grow with the number of binaries.
    let ctx = Context {
        groupings: Vec::new(),
        ..Context::for_run(&is_static)
    };
    recording.report(&ctx, start, false, &mut |_, _, _, added| {
        anyhow::ensure!(!give_up(), "stopped by a signal before it was done");
        if let Some(row) = added.row {
            inserts.insert(&ProcessOut::of(&row))?;
            n += 1;
        }
        Ok(())
    })?;
    Ok(n)
}

fn insert_found(tx: &Transaction<'_>, f: &Found) -> rusqlite::Result<()> {
    tx.prepare_cached("INSERT OR REPLACE INTO found VALUES (?1,?2,?3,?4)")?
        .execute(params![
            f.key.pid,
            f.key.stored_start_ns(),
            text_or_blob(&f.binary),
            f.parent_binary.as_deref().map(text_or_blob),
        ])?;
    Ok(())
}

fn set_meta(tx: &Transaction<'_>, items: &[(String, String)]) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached("INSERT OR REPLACE INTO meta VALUES (?1, ?2)")?;
    for (k, v) in items {
        stmt.execute(params![k, v])?;
    }
    Ok(())
}

fn lost_meta(lost: &LostCounts) -> Vec<(String, String)> {
    vec![
        ("lost_ringbuf_full".into(), lost.ringbuf_full.to_string()),
        (
            "lost_state_map_full".into(),
            lost.state_map_full.to_string(),
        ),
        ("lost_undecodable".into(), lost.undecodable.to_string()),
        ("lost_ia32_unseen".into(), lost.ia32_unseen.to_string()),
        ("lost_exit_unseen".into(), lost.exit_unseen.to_string()),
    ]
}

fn run(
    mut conn: Connection,
    (path, file): (&Path, FileId),
    rx: &Receiver<Msg>,
    keep_args: bool,
    commit_every: Duration,
    progress: &mut Progress,
) -> Written {
    loop {
        // Wait for the first message of a batch, then gather for up to `commit_every`.
        let first = match rx.recv() {
            Ok(m) => m,
            Err(_) => return Ok(None),
        };
        let deadline = Instant::now() + commit_every;
        let tx = conn.transaction()?;
        let mut finish = None;
        {
            let mut inserts = Inserts::new(&tx, keep_args)?;
            let mut next = Some(first);
            // Records and other messages taken since the clock was last read.
            let mut unclocked = 0;
            while let Some(msg) = next.take() {
                match msg {
                    Msg::Records(records) => {
                        // All of them count as not committed before the first insert: one
                        // that fails leaves the rest of the message unwritten too.
                        progress.pending += records.len() as u64;
                        for r in &records {
                            inserts.insert(r)?;
                        }
                        unclocked += records.len();
                    }
                    Msg::Found(f) => insert_found(&tx, &f)?,
                    Msg::Cgroup(id, path) => {
                        tx.prepare_cached("INSERT OR REPLACE INTO cgroups VALUES (?1,?2)")?
                            .execute(params![id as i64, text_or_blob(&path)])?;
                    }
                    Msg::Lost(l) => set_meta(&tx, &lost_meta(&l))?,
                    Msg::Sync(ack) => {
                        progress.acks.push(ack);
                        break;
                    }
                    Msg::Finish(f) => {
                        finish = Some(f);
                        break;
                    }
                }
                // The clock is read when the channel is empty, and every `CLOCK_EVERY`
                // records or messages while it is not, so that a writer that falls behind
                // still commits about every `commit_every`.
                unclocked += 1;
                if unclocked >= CLOCK_EVERY {
                    unclocked = 0;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                next = match rx.try_recv() {
                    Ok(m) => Some(m),
                    Err(TryRecvError::Empty) => rx
                        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                        .ok(),
                    Err(TryRecvError::Disconnected) => None,
                };
            }
        }
        if let Some(f) = finish {
            let left = commit_last(tx, *f, progress)?;
            let derived = match left {
                Left::Nothing(n) => Ok(n),
                Left::Derive(flag) => {
                    derive_tables(&mut conn, path, file, &|| flag.load(Ordering::Relaxed))
                }
            };
            // The log into the file, and truncated: a finished recording is one file, also
            // when the derivation failed (it holds every record all the same).
            conn.pragma_update(None, "wal_checkpoint", "TRUNCATE")?;
            return derived.map(Some);
        }
        tx.commit()?;
        progress.pending = 0;
        progress.answer();
    }
}

/// What is left to do once the last records are committed.
enum Left {
    /// Nothing: the derived tables went in with them, this many processes.
    Nothing(u64),
    /// Derive the tables from the file, unless the flag is set.
    Derive(Arc<AtomicBool>),
}

/// The derived tables could not be made from the file: every record and the final meta are
/// in it, and `report` reads it.
#[derive(Debug)]
struct DeriveFailed(anyhow::Error);

impl std::fmt::Display for DeriveFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "deriving the processes and phases tables: {:#}", self.0)
    }
}

impl std::error::Error for DeriveFailed {}

/// The file a writer created, as `stat` names it: the derivation reads the file at its path
/// again, and only if it is still this one (not moved away or replaced while recording).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata(path)?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// Commits the last records and the final meta: with the derived tables when they came as
/// rows; else (`Derived::FromFile`) without, so that the file read back holds every record,
/// and a derivation that fails or is killed leaves the recording finished all the same.
fn commit_last(tx: Transaction<'_>, f: Finish, progress: &mut Progress) -> Result<Left> {
    let Finish { meta, processes } = f;
    let left = match processes {
        Derived::Rows(rows) => {
            let mut inserts = DerivedInserts::new(&tx)?;
            for row in &rows {
                inserts.insert(row)?;
            }
            Left::Nothing(rows.len() as u64)
        }
        Derived::FromFile(give_up) => Left::Derive(give_up),
    };
    set_meta(&tx, &meta)?;
    tx.commit()?;
    progress.pending = 0;
    Ok(left)
}

/// Derives the processes/phases tables from the file, whose records are all committed;
/// returns the processes in them. No checkpoint comes first: the log holds the last
/// batches, so the read-back (and any other reader meanwhile) reads the file through it, a
/// snapshot of every record and nothing else, while the derived rows go into the log after
/// them. (A checkpoint that emptied the log first would have the read-back, and another
/// reader, open the file as immutable, which the next checkpoint then changes under them.)
fn derive_tables(
    conn: &mut Connection,
    path: &Path,
    file: FileId,
    give_up: &dyn Fn() -> bool,
) -> Result<u64> {
    let derived = (|| {
        let now = FileId::of(path).with_context(|| format!("cannot stat {}", path.display()))?;
        anyhow::ensure!(
            now == file,
            "{} is no longer the file being recorded (moved or replaced while recording)",
            path.display()
        );
        let tx = conn.transaction()?;
        let n = derive_from_file(&tx, path, give_up)?;
        tx.commit()?;
        anyhow::Ok(n)
    })()
    .map_err(|e| anyhow::Error::new(DeriveFailed(e)))?;
    Ok(derived)
}

/// After the writer stopped on an error: counts what it had not committed and every record
/// still sent to it as dropped, answering `Sync`s, until `Finish` or the last sender goes.
fn discard(rx: &Receiver<Msg>, mut progress: Progress, dropped: &AtomicU64) {
    dropped.fetch_add(progress.pending, Ordering::SeqCst);
    progress.answer();
    for msg in rx.iter() {
        match msg {
            Msg::Records(records) => {
                dropped.fetch_add(records.len() as u64, Ordering::SeqCst);
            }
            Msg::Found(_) | Msg::Cgroup(..) | Msg::Lost(_) => {}
            Msg::Sync(ack) => {
                let _ = ack.send(());
            }
            Msg::Finish(_) => return,
        }
    }
}

impl Writer {
    /// Creates the database (0600, owned by the invoking user under sudo) and starts the
    /// writer thread. `meta` is stored at once.
    pub fn create(
        path: &Path,
        owner: Option<&InvokingUser>,
        meta: Vec<(String, String)>,
        keep_args: bool,
    ) -> Result<Self> {
        Self::create_committing_every(path, owner, meta, keep_args, COMMIT_EVERY)
    }

    /// `create`, committing at least every `commit_every` (tests use a short one).
    fn create_committing_every(
        path: &Path,
        owner: Option<&InvokingUser>,
        meta: Vec<(String, String)>,
        keep_args: bool,
        commit_every: Duration,
    ) -> Result<Self> {
        // Everything that creates a file is done as the invoking user (`as_user`): the
        // database, and the -wal and -shm files that SQLite creates beside it in the first
        // transaction, on this thread. The writer thread only writes to them.
        let (conn, file) = as_user(owner, || {
            // A log left by an earlier recording of the same name would be replayed into
            // this one.
            for suffix in ["-wal", "-shm"] {
                let mut p = path.as_os_str().to_owned();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
            // Create the file ourselves so that its mode is right from the start.
            drop(open_private_file(path)?);
            let mut conn = Connection::open(path)
                .with_context(|| format!("cannot open {} as SQLite", path.display()))?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            let tx = conn.transaction()?;
            tx.execute_batch(SCHEMA)
                .with_context(|| format!("cannot create the schema in {}", path.display()))?;
            let mut all = vec![("schema_version".to_string(), RECORDING_SCHEMA.to_string())];
            all.extend(meta);
            set_meta(&tx, &all)?;
            tx.commit()?;
            let file =
                FileId::of(path).with_context(|| format!("cannot stat {}", path.display()))?;
            Ok((conn, file))
        })?;
        let (tx, rx) = mpsc::channel();
        let shown = path.display().to_string();
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        let at = path.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("forkprof-writer".into())
            .spawn(move || {
                let mut progress = Progress::default();
                let result = run(conn, (&at, file), &rx, keep_args, commit_every, &mut progress);
                if let Err(e) = &result {
                    // Say so at once: the trace goes on, the file keeps what was committed.
                    eprintln!(
                        "forkprof: recording to {shown} stopped: {e:#}; it keeps everything committed before"
                    );
                    discard(&rx, progress, &counted);
                }
                result
            })?;
        Ok(Self {
            tx,
            queued: RefCell::new(Vec::new()),
            handle,
            dropped,
            shown: path.display().to_string(),
        })
    }

    /// Queues a record (sent with the next `RECORDS_PER_MESSAGE`, or at `flush`). The
    /// channel is unbounded, so the writer never drops a record for being slow; it drops
    /// them only once it has stopped, and counts them.
    pub fn record(&self, record: Record) {
        let full = {
            let mut queued = self.queued.borrow_mut();
            queued.push(record);
            queued.len() >= RECORDS_PER_MESSAGE
        };
        if full {
            self.flush();
        }
    }

    /// Sends the queued records to the writer thread. The session calls it after each batch
    /// from the ring buffer, and every other message sends them first, so that the writer
    /// sees everything in the order it came.
    pub fn flush(&self) {
        let mut queued = self.queued.borrow_mut();
        if queued.is_empty() {
            return;
        }
        // The next message's room at once, as much as this one took, not grown by
        // reallocation and copy as it fills; and no more, for a backlog of small batches
        // waits in the channel with its room.
        let room = queued.len();
        let records = std::mem::replace(&mut *queued, Vec::with_capacity(room));
        drop(queued);
        let n = records.len() as u64;
        if self.tx.send(Msg::Records(records)).is_err() {
            self.dropped.fetch_add(n, Ordering::SeqCst);
        }
    }

    /// Records that did not reach the file: those of a batch whose insert or commit failed,
    /// and every one sent after the recording stopped. First waits until the writer has
    /// committed (or dropped) everything sent before, so the count is final for them.
    pub fn dropped(&self) -> u64 {
        self.flush();
        let (ack, answered) = mpsc::channel();
        if self.tx.send(Msg::Sync(ack)).is_ok() {
            // An error: the writer is gone (a panic), and counts nothing more.
            let _ = answered.recv();
        }
        self.dropped.load(Ordering::SeqCst)
    }

    /// Queues the label of a process found running when tracing started.
    pub fn found(&self, found: &Found) {
        self.flush();
        let _ = self.tx.send(Msg::Found(found.clone()));
    }

    /// Queues a cgroup id's path.
    pub fn cgroup(&self, id: u64, path: &[u8]) {
        self.flush();
        let _ = self.tx.send(Msg::Cgroup(id, path.to_vec()));
    }

    pub fn lost(&self, lost: &LostCounts) {
        self.flush();
        let _ = self.tx.send(Msg::Lost(lost.clone()));
    }

    /// Writes the final meta and the derived processes/phases tables (the rows of `report`,
    /// built from the whole trace in memory), then waits for the writer to commit
    /// everything.
    pub fn finish(
        self,
        lost: &LostCounts,
        report: &Report,
        meta: Vec<(String, String)>,
    ) -> Result<u64> {
        let rows = report
            .processes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(ProcessOut::of)
            .collect();
        self.end(lost, meta, Derived::Rows(rows))
    }

    /// `finish` for a session that kept no trace (`record`): the writer derives the
    /// processes/phases tables from the file once every record is committed, one process
    /// at a time. Returns the processes in them. Once `give_up` is set the derivation stops,
    /// and the file is left finished without those tables (an error says so).
    pub fn finish_from_file(
        self,
        lost: &LostCounts,
        meta: Vec<(String, String)>,
        give_up: Arc<AtomicBool>,
    ) -> Result<u64> {
        self.end(lost, meta, Derived::FromFile(give_up))
    }

    fn end(
        self,
        lost: &LostCounts,
        mut meta: Vec<(String, String)>,
        processes: Derived,
    ) -> Result<u64> {
        self.flush();
        meta.extend(lost_meta(lost));
        let _ = self
            .tx
            .send(Msg::Finish(Box::new(Finish { meta, processes })));
        drop(self.tx);
        let written = self
            .handle
            .join()
            .map_err(|_| anyhow::anyhow!("the recording writer panicked"))?;
        // The writer said why when it stopped; this is the conclusion, not the cause again,
        // with what it means: how many records the file lacks.
        let incomplete = |e: Option<anyhow::Error>| {
            if e.as_ref().is_some_and(|e| e.is::<DeriveFailed>()) {
                return anyhow::anyhow!(
                    "the recording {} lacks its processes and phases tables (see above); every \
                     record is in it, and `forkprof report` reads it",
                    self.shown
                );
            }
            let lacks = match self.dropped.load(Ordering::SeqCst) {
                0 => "after every record reached it".to_string(),
                n => format!("and {n} records did not reach it"),
            };
            anyhow::anyhow!(
                "the recording {} is incomplete: its writing stopped (see above), {lacks}",
                self.shown
            )
        };
        match written {
            Ok(Some(n)) => Ok(n),
            // The channel closed before `Finish` was read: cannot happen while `self.tx`
            // sent it, but never a silent success.
            Ok(None) => Err(incomplete(None)),
            Err(e) => Err(incomplete(Some(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests_support::{exit, key};

    fn fresh(name: &str) -> (std::path::PathBuf, Writer) {
        fresh_committing_every(name, COMMIT_EVERY)
    }

    /// A writer to a new file in a directory of its own, committing every `every`.
    fn fresh_committing_every(name: &str, every: Duration) -> (std::path::PathBuf, Writer) {
        let dir =
            std::env::temp_dir().join(format!("forkprof-writer-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.db");
        let writer = Writer::create_committing_every(&path, None, Vec::new(), true, every).unwrap();
        (path, writer)
    }

    /// Sends the exit records of processes `pids` (each created at its pid's ns).
    fn record_exits(w: &Writer, pids: std::ops::RangeInclusive<u32>) {
        for pid in pids {
            w.record(exit(key(pid, u64::from(pid)), 0));
        }
    }

    fn exits_in(path: &Path) -> i64 {
        let conn = Connection::open(path).unwrap();
        conn.query_row("SELECT count(*) FROM exits", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn dropped_commits_what_came_before_and_counts_nothing_when_all_is_stored() {
        let (path, w) = fresh("ok");
        record_exits(&w, 1..=3);
        assert_eq!(w.dropped(), 0);
        assert_eq!(exits_in(&path), 3, "committed before dropped() answered");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn recording_dropped_is_in_the_total_and_in_json_only_when_nonzero() {
        let mut lost = LostCounts {
            ringbuf_full: 1,
            ..Default::default()
        };
        let json = serde_json::to_string(&lost).unwrap();
        assert_eq!(
            json,
            r#"{"ringbuf_full":1,"state_map_full":0,"undecodable":0}"#
        );
        lost.recording_dropped = 2;
        assert_eq!(lost.total(), 3);
        lost.exit_unseen = 4;
        assert_eq!(lost.total(), 7);
        assert!(
            serde_json::to_string(&lost)
                .unwrap()
                .ends_with(r#""recording_dropped":2,"exit_unseen":4}"#)
        );
        lost.exit_unseen = 0;
        assert!(
            serde_json::to_string(&lost)
                .unwrap()
                .ends_with(r#""undecodable":0,"recording_dropped":2}"#)
        );
    }

    #[test]
    fn a_writer_that_falls_behind_still_commits_as_it_goes() {
        let (path, w) = fresh_committing_every("behind", Duration::from_millis(5));
        // Queued at once, far faster than SQLite inserts them (about a microsecond a row or
        // more): the channel does not run empty for 20 ms or longer, so only the batch's
        // clock can end a transaction meanwhile.
        const N: u32 = 20_000;
        record_exits(&w, 1..=N);
        w.flush();
        let mut seen_between = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let n = exits_in(&path);
            if n > 0 && n < i64::from(N) {
                seen_between = Some(n);
            }
            if n == i64::from(N) || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(w.dropped(), 0);
        assert_eq!(exits_in(&path), i64::from(N));
        assert!(
            seen_between.is_some(),
            "no commit was seen before the backlog was written: the batch waited for the channel to run empty"
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_recording_moved_away_keeps_its_records_and_meta_and_says_what_it_lacks() {
        let (path, w) = fresh("moved");
        record_exits(&w, 1..=3);
        // Moved while recording: the writer goes on through its open file, and the
        // derivation, which reads the file at its path, finds another one there.
        let moved = path.with_file_name("moved.db");
        std::fs::rename(&path, &moved).unwrap();
        std::fs::write(&path, b"not the recording").unwrap();
        let meta = vec![("ended_ns".to_string(), "42".to_string())];
        let err = w
            .finish_from_file(&LostCounts::default(), meta, Arc::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("lacks its processes and phases tables"),
            "{err}"
        );
        assert!(err.contains("every record is in it"), "{err}");
        assert_eq!(exits_in(&moved), 3);
        let conn = Connection::open(&moved).unwrap();
        let ended: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'ended_ns'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(ended, "42", "the final meta went in with the last records");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// Every loss count a recording keeps comes back from it as it went in, each its own.
    #[test]
    fn every_loss_count_comes_back_from_the_recording() {
        let (path, w) = fresh("lost");
        record_exits(&w, 1..=2);
        let lost = LostCounts {
            ringbuf_full: 1,
            state_map_full: 2,
            undecodable: 3,
            recording_dropped: 0,
            ia32_unseen: 5,
            exit_unseen: 6,
        };
        w.finish_from_file(&lost, Vec::new(), Arc::default())
            .unwrap();
        let back = crate::recording::reader::Recording::open(&path)
            .unwrap()
            .load(false)
            .unwrap()
            .lost;
        assert_eq!(back, lost);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn the_tables_derived_from_the_file_hold_its_processes() {
        let (path, w) = fresh("derived");
        record_exits(&w, 1..=3);
        let n = w
            .finish_from_file(&LostCounts::default(), Vec::new(), Arc::default())
            .unwrap();
        assert_eq!(n, 3);
        let conn = Connection::open(&path).unwrap();
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM processes", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 3);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_derivation_given_up_leaves_every_record_and_the_final_meta_in_one_file() {
        let (path, w) = fresh("given-up");
        record_exits(&w, 1..=3);
        // Another connection open all along: the writer's closing is then not the last one,
        // which would empty the log by itself.
        // (It reads once, so that it holds the log's shared memory, as a reader does.)
        let other = Connection::open(&path).unwrap();
        let _: i64 = other
            .query_row("SELECT count(*) FROM meta", [], |r| r.get(0))
            .unwrap();
        let meta = vec![("ended_ns".to_string(), "42".to_string())];
        let err = w
            .finish_from_file(
                &LostCounts::default(),
                meta,
                Arc::new(AtomicBool::new(true)),
            )
            .unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains("lacks its processes and phases tables"),
            "{err}"
        );
        assert_eq!(exits_in(&path), 3);
        let wal = path.with_file_name("w.db-wal");
        assert_eq!(
            std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0),
            0,
            "the log went into the file"
        );
        drop(other);
        let conn = Connection::open(&path).unwrap();
        let (rows, ended): (i64, String) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM processes), \
                 (SELECT value FROM meta WHERE key = 'ended_ns')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(rows, 0, "no half of the derived tables");
        assert_eq!(ended, "42");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_derivation_given_up_midway_rolls_back_the_rows_it_had_inserted() {
        let (path, w) = fresh("midway");
        record_exits(&w, 1..=3);
        // The file with every record and no derived rows yet.
        let given_up = Arc::new(AtomicBool::new(true));
        w.finish_from_file(&LostCounts::default(), Vec::new(), given_up)
            .unwrap_err();
        let mut conn = Connection::open(&path).unwrap();
        let asked = std::cell::Cell::new(0);
        let err = derive_tables(&mut conn, &path, FileId::of(&path).unwrap(), &|| {
            asked.set(asked.get() + 1);
            asked.get() > 2
        })
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("stopped by a signal"),
            "{err:#}"
        );
        assert_eq!(
            asked.get(),
            3,
            "two processes derived before the third gave up"
        );
        let (processes, phases): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM processes), (SELECT count(*) FROM phases)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            (processes, phases),
            (0, 0),
            "the rows inserted were rolled back"
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_stopped_writer_counts_every_record_it_drops() {
        let (path, w) = fresh("stopped");
        // Another connection holds the write lock: the writer's first insert fails (busy),
        // and the recording stops there.
        let blocker = Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        record_exits(&w, 1..=3);
        assert_eq!(w.dropped(), 3);
        drop(blocker);
        record_exits(&w, 4..=4);
        assert_eq!(w.dropped(), 4, "a stopped recording stays stopped");
        assert_eq!(exits_in(&path), 0);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
