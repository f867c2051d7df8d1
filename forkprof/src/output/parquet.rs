//! One row per process as Apache Parquet (`forkprof export --parquet`), for DuckDB, Spark,
//! Trino or ClickHouse to query recordings of many hosts together. Written with the Arrow
//! crates, `BATCH_ROWS` processes at a time: each batch is one record batch and one row
//! group, so the writer holds one batch, never the whole file. The columns are documented in
//! docs/recording.md.
use std::io::Write;
use std::sync::Arc;

use anyhow::Result;
use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::model::PHASES;
use crate::model::processes::{COLUMNS, ProcessView, signed};

/// Processes per record batch and per row group.
pub const BATCH_ROWS: usize = 65_536;

/// The layout's version (`forkprof.export_version` in the footer): bumped when a column
/// changes meaning or type; a new column alone leaves it as it is.
pub const EXPORT_VERSION: u32 = 1;

/// The types of `processes::COLUMNS`, the columns before the phases: (type, nullable). Every
/// phase follows as a nullable Int64 named as the phase (ns; a count for `cow_faults`).
/// Signed types throughout, as Spark and Trino have no unsigned integers.
const TYPES: [(DataType, bool); 15] = [
    (DataType::Utf8, true),   // host
    (DataType::Int32, false), // pid
    (DataType::Int64, false), // start_ns
    (DataType::Int32, true),  // parent_pid
    (DataType::Int64, true),  // parent_start_ns
    (DataType::Utf8, false),  // binary
    (DataType::Utf8, false),  // parent_binary
    (DataType::Utf8, false),  // method
    (DataType::Utf8, true),   // cgroup
    (DataType::Utf8, true),   // unit
    (DataType::Int32, true),  // exit_code
    (DataType::Int32, true),  // exit_signal
    (DataType::Int64, false), // execs
    (DataType::Int64, false), // failed_execs
    (DataType::Int64, false), // atime_updates
];

/// The Arrow schema of the file: `COLUMNS`, then one column per phase in report order.
pub fn schema() -> Schema {
    let fixed = COLUMNS
        .iter()
        .zip(&TYPES)
        .map(|(name, (ty, nullable))| Field::new(*name, ty.clone(), *nullable));
    let phases = PHASES
        .iter()
        .map(|p| Field::new(p.name(), DataType::Int64, true));
    Schema::new(fixed.chain(phases).collect::<Vec<_>>())
}

/// The columns of one record batch, filled row by row.
struct Batch {
    host: StringBuilder,
    pid: Int32Builder,
    start_ns: Int64Builder,
    parent_pid: Int32Builder,
    parent_start_ns: Int64Builder,
    binary: StringBuilder,
    parent_binary: StringBuilder,
    method: StringBuilder,
    cgroup: StringBuilder,
    unit: StringBuilder,
    exit_code: Int32Builder,
    exit_signal: Int32Builder,
    execs: Int64Builder,
    failed_execs: Int64Builder,
    atime_updates: Int64Builder,
    phases: Vec<Int64Builder>,
    rows: usize,
}

impl Batch {
    fn new() -> Self {
        Self {
            host: StringBuilder::new(),
            pid: Int32Builder::new(),
            start_ns: Int64Builder::new(),
            parent_pid: Int32Builder::new(),
            parent_start_ns: Int64Builder::new(),
            binary: StringBuilder::new(),
            parent_binary: StringBuilder::new(),
            method: StringBuilder::new(),
            cgroup: StringBuilder::new(),
            unit: StringBuilder::new(),
            exit_code: Int32Builder::new(),
            exit_signal: Int32Builder::new(),
            execs: Int64Builder::new(),
            failed_execs: Int64Builder::new(),
            atime_updates: Int64Builder::new(),
            phases: PHASES.iter().map(|_| Int64Builder::new()).collect(),
            rows: 0,
        }
    }

    fn push(&mut self, v: &ProcessView<'_>, host: Option<&str>) {
        let f = v.fields();
        self.host.append_option(host);
        self.pid.append_value(f.pid);
        self.start_ns.append_value(f.start_ns);
        self.parent_pid.append_option(f.parent_pid);
        self.parent_start_ns.append_option(f.parent_start_ns);
        self.binary.append_value(f.binary);
        self.parent_binary.append_value(f.parent_binary);
        self.method.append_value(f.method);
        self.cgroup.append_option(f.cgroup);
        self.unit.append_option(f.unit);
        self.exit_code.append_option(f.exit_code);
        self.exit_signal.append_option(f.exit_signal);
        self.execs.append_value(f.execs);
        self.failed_execs.append_value(f.failed_execs);
        self.atime_updates.append_value(f.atime_updates);
        for (b, &phase) in self.phases.iter_mut().zip(PHASES.iter()) {
            b.append_option(v.phases.get(phase).map(signed));
        }
        self.rows += 1;
    }

    /// The rows so far as a record batch; the builders start empty again.
    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.host.finish()),
            Arc::new(self.pid.finish()),
            Arc::new(self.start_ns.finish()),
            Arc::new(self.parent_pid.finish()),
            Arc::new(self.parent_start_ns.finish()),
            Arc::new(self.binary.finish()),
            Arc::new(self.parent_binary.finish()),
            Arc::new(self.method.finish()),
            Arc::new(self.cgroup.finish()),
            Arc::new(self.unit.finish()),
            Arc::new(self.exit_code.finish()),
            Arc::new(self.exit_signal.finish()),
            Arc::new(self.execs.finish()),
            Arc::new(self.failed_execs.finish()),
            Arc::new(self.atime_updates.finish()),
        ];
        columns.extend(
            self.phases
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        self.rows = 0;
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// What the file says besides its rows.
#[derive(Clone, Debug, Default)]
pub struct FileInfo {
    /// The `host` column's value (null when unknown).
    pub host: Option<String>,
    /// Key-value metadata of the Parquet footer (`forkprof.*`).
    pub metadata: Vec<(String, String)>,
}

/// Writes `rows` to `out` as Parquet (Snappy-compressed), `BATCH_ROWS` at a time, and
/// returns how many there were and `out` itself, flushed.
/// A Parquet file written one process at a time: it holds one batch of rows. Batches are
/// encoded and compressed on a thread of their own.
pub struct Writer<W: Write + Send + 'static> {
    to_encoder: Option<std::sync::mpsc::SyncSender<RecordBatch>>,
    encoder: Option<std::thread::JoinHandle<Result<W>>>,
    schema: SchemaRef,
    batch: Batch,
    host: Option<String>,
    total: u64,
}

impl<W: Write + Send + 'static> Writer<W> {
    pub fn new(info: &FileInfo, out: W) -> Result<Self> {
        let schema: SchemaRef = Arc::new(schema());
        let version = (
            "forkprof.export_version".to_string(),
            EXPORT_VERSION.to_string(),
        );
        let metadata = std::iter::once(&version)
            .chain(&info.metadata)
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(BATCH_ROWS))
            .set_key_value_metadata(Some(metadata))
            .build();
        let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(props))?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<RecordBatch>(1);
        let encoder = std::thread::spawn(move || -> Result<W> {
            for batch in rx {
                writer.write(&batch)?;
            }
            // Writes the footer; parquet buffers its writes, so `out` needs no buffer of
            // its own.
            let mut out = writer.into_inner()?;
            out.flush()?;
            Ok(out)
        });
        Ok(Self {
            to_encoder: Some(tx),
            encoder: Some(encoder),
            schema,
            batch: Batch::new(),
            host: info.host.clone(),
            total: 0,
        })
    }

    /// Hands the rows so far to the encoder; its error when it has stopped.
    fn send(&mut self) -> Result<()> {
        let batch = self.batch.finish(&self.schema)?;
        let sent = self.to_encoder.as_ref().map(|tx| tx.send(batch));
        if let Some(Err(_)) = sent {
            // The encoder stopped on an error (a full disk, say): that error.
            self.to_encoder = None;
            return self.join().map(|_| ());
        }
        Ok(())
    }

    fn join(&mut self) -> Result<W> {
        self.to_encoder = None;
        match self.encoder.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the Parquet encoder panicked"))),
            None => Err(anyhow::anyhow!("the Parquet encoder has stopped")),
        }
    }

    pub fn push(&mut self, row: &ProcessView<'_>) -> Result<()> {
        self.batch.push(row, self.host.as_deref());
        self.total += 1;
        if self.batch.rows == BATCH_ROWS {
            self.send()?;
        }
        Ok(())
    }

    /// Writes the last rows and the footer; returns the number of rows and the output.
    pub fn finish(mut self) -> Result<(u64, W)> {
        if self.batch.rows > 0 {
            self.send()?;
        }
        let out = self.join()?;
        Ok((self.total, out))
    }
}

/// Writes `rows` to `out` as one Parquet file.
pub fn write<'a, W: Write + Send + 'static>(
    rows: impl Iterator<Item = ProcessView<'a>>,
    info: &FileInfo,
    out: W,
) -> Result<(u64, W)> {
    let mut w = Writer::new(info, out)?;
    for row in rows {
        w.push(&row)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use arrow_array::cast::AsArray as _;
    use arrow_array::types::{Int32Type, Int64Type};
    use forkprof_common::ld_outcome;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;
    use crate::decode::Record;
    use crate::model::Trace;
    use crate::model::processes::in_order;
    use crate::model::tests_support::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("forkprof-parquet-{}-{name}", std::process::id()))
    }

    /// Writes `trace` to a file and reads it back: the batches and the footer's metadata.
    fn round_trip(trace: &Trace, name: &str) -> (Vec<RecordBatch>, Vec<(String, String)>) {
        let path = temp(name);
        let info = FileInfo {
            host: Some("web-1".into()),
            metadata: vec![("forkprof.kernel".into(), "6.12".into())],
        };
        let never_static = |_: &[u8]| false;
        let file = std::fs::File::create(&path).unwrap();
        let (n, _) = write(in_order(trace, &never_static), &info, file).unwrap();
        assert_eq!(n, trace.processes.len() as u64);
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
        let kv = builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .into_iter()
            .flatten()
            .filter(|kv| kv.key.starts_with("forkprof."))
            .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
            .collect();
        // The fields as written (the footer's metadata shows as the schema's).
        assert_eq!(builder.schema().fields(), schema().fields());
        let batches = builder
            .build()
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        (batches, kv)
    }

    fn i64s(b: &RecordBatch, name: &str) -> Vec<Option<i64>> {
        b.column_by_name(name)
            .unwrap()
            .as_primitive::<Int64Type>()
            .iter()
            .collect()
    }

    fn i32s(b: &RecordBatch, name: &str) -> Vec<Option<i32>> {
        b.column_by_name(name)
            .unwrap()
            .as_primitive::<Int32Type>()
            .iter()
            .collect()
    }

    fn strs(b: &RecordBatch, name: &str) -> Vec<Option<String>> {
        b.column_by_name(name)
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|s| s.map(str::to_string))
            .collect()
    }

    /// `forkprof run`'s root (pid 1) execs /bin/make, is killed by SIGKILL; its fork child
    /// (pid 2) fails one exec, execs /bin/cc, links dynamically and exits 3; a vfork child
    /// (pid 3) has no exit yet.
    fn sample() -> Trace {
        let mut t = Trace::default();
        t.set_root(1);
        let (root, cc, sh) = (key(1, 0), key(2, 1_000_000), key(3, 2_000_000));
        t.ingest(exec(root, 500_000, b"/bin/make", 0, 0));
        t.ingest(spawn(root, cc, 56, SIGCHLD));
        t.ingest(exec(cc, 1_200_000, b"/usr/local/bin/cc", libc::ENOENT, 0));
        // cc exec'd in a service's cgroup.
        let mut cc_exec = exec(cc, 1_400_000, b"/bin/cc", 0, 3);
        if let Record::Exec(e) = &mut cc_exec {
            e.cgroup_id = 42;
        }
        t.cgroup(42, b"/system.slice/ci.service/job-1");
        t.ingest(cc_exec);
        t.ingest(ld(cc, ld_outcome::COMPLETE));
        t.ingest(exit(cc, 3 << 8));
        t.ingest(spawn(root, sh, 58, 0));
        t.ingest(exec(sh, 2_500_000, b"/bin/sh", 0, 0));
        t.ingest(exit(root, 9));
        t
    }

    #[test]
    fn one_row_per_process_with_identity_lineage_exit_and_phases() {
        let (batches, kv) = round_trip(&sample(), "sample");
        assert_eq!(batches.len(), 1);
        let b = &batches[0];
        assert_eq!(b.num_rows(), 3);
        // In creation order, as the report counts them.
        assert_eq!(strs(b, "host"), vec![Some("web-1".to_string()); 3]);
        assert_eq!(i32s(b, "pid"), [Some(1), Some(2), Some(3)]);
        assert_eq!(
            i64s(b, "start_ns"),
            [Some(0), Some(1_000_000), Some(2_000_000)]
        );
        assert_eq!(i32s(b, "parent_pid"), [None, Some(1), Some(1)]);
        assert_eq!(i64s(b, "parent_start_ns"), [None, Some(0), Some(0)]);
        let text = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        assert_eq!(
            strs(b, "binary"),
            text(&["/bin/make", "/bin/cc", "/bin/sh"])
        );
        assert_eq!(
            strs(b, "parent_binary"),
            text(&["[forkprof]", "/bin/make", "/bin/make"])
        );
        assert_eq!(strs(b, "method"), text(&["unknown", "fork", "vfork"]));
        let cg = |v: Option<&str>| v.map(String::from);
        assert_eq!(
            strs(b, "cgroup"),
            [None, cg(Some("/system.slice/ci.service/job-1")), None]
        );
        assert_eq!(strs(b, "unit"), [None, cg(Some("ci.service")), None]);
        assert_eq!(i32s(b, "exit_code"), [None, Some(3), None]);
        assert_eq!(i32s(b, "exit_signal"), [Some(9), None, None]);
        assert_eq!(i64s(b, "execs"), [Some(1), Some(1), Some(1)]);
        assert_eq!(i64s(b, "failed_execs"), [Some(0), Some(1), Some(0)]);
        // Every phase, as `Phases::of` gives it: null where not measured.
        let t = sample();
        let never_static = |_: &[u8]| false;
        let views: Vec<_> = in_order(&t, &never_static).collect();
        for phase in PHASES {
            let want: Vec<Option<i64>> = views
                .iter()
                .map(|v| v.phases.get(phase).map(|x| x as i64))
                .collect();
            assert_eq!(i64s(b, phase.name()), want, "{}", phase.name());
        }
        assert_eq!(i64s(b, "cow_faults"), [None, Some(3), None]);
        assert_eq!(i64s(b, "ld_map"), [None, Some(200_000), None]);
        assert_eq!(i64s(b, "exec_failed"), [None, Some(10_000), None]);
        assert_eq!(
            kv,
            [
                ("forkprof.export_version".to_string(), "1".to_string()),
                ("forkprof.kernel".to_string(), "6.12".to_string())
            ]
        );
    }

    #[test]
    fn batches_hold_at_most_batch_rows() {
        let mut t = Trace::default();
        let n = BATCH_ROWS + 3;
        for i in 0..n as u32 {
            let k = key(100 + i, 1_000 + u64::from(i));
            t.ingest(spawn(key(1, 0), k, 56, SIGCHLD));
        }
        let (batches, _) = round_trip(&t, "batches");
        let rows: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(rows.iter().sum::<usize>(), n);
        assert!(rows.iter().all(|&r| r <= BATCH_ROWS), "{rows:?}");
        let last = batches.last().unwrap();
        assert_eq!(i32s(last, "pid").last(), Some(&Some(100 + n as i32 - 1)));
    }

    #[test]
    fn an_empty_recording_gives_a_file_with_the_columns_and_no_rows() {
        let (batches, _) = round_trip(&Trace::default(), "empty");
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    }

    /// demo.db (`forkprof run -o` of `fp-workload demo`): one row per process the report
    /// counts.
    #[test]
    fn the_demo_recording_has_one_row_per_reported_process() {
        let db = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db");
        let rec = crate::recording::Recording::open(&db).unwrap();
        let trace = rec.load(false).unwrap();
        let never_static = |_: &[u8]| false;
        let report = crate::model::Report::build(
            &trace,
            &crate::model::report::Context::for_run(&never_static),
        );
        let (batches, _) = round_trip(&trace, "demo");
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows as u64, report.summary.processes);
        assert_eq!(rows, 77);
    }

    /// docs/recording.md lists every column, with its type, in the file's order.
    #[test]
    fn every_column_is_documented_with_its_type() {
        let doc = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/recording.md"),
        )
        .unwrap();
        let mut at = 0;
        for field in schema().fields() {
            let row = format!("| `{}` | {} ", field.name(), field.data_type());
            at += doc[at..].find(&row).unwrap_or_else(|| {
                panic!("docs/recording.md lacks {row:?} (after byte {at}: in the file's order)")
            });
        }
    }
}
