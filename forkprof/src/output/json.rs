//! The report as JSON (`--json`, `--format json`).
use std::io::Write;

use anyhow::Result;

use crate::model::Report;
use crate::model::report::ProcessRow;

/// One JSON document; keys are documented in the README and stable within a schema version.
pub fn write(report: &Report, out: &mut dyn Write) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)?;
    Ok(())
}

/// Per-process rows kept on disk until the report is written: a report of millions of
/// processes holds none of them in memory. The file is unlinked at once, so nothing is
/// left behind however forkprof ends.
pub struct RowSpool {
    file: std::io::BufWriter<std::fs::File>,
    rows: u64,
}

impl RowSpool {
    pub fn new() -> Result<Self> {
        let dir = std::env::temp_dir();
        let path = dir.join(format!(
            "forkprof-rows-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        use std::os::unix::fs::OpenOptionsExt as _;
        // 0600: the rows hold command lines, which can hold secrets, for the moment
        // before the file is unlinked.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
        let _ = std::fs::remove_file(&path);
        Ok(Self {
            file: std::io::BufWriter::new(file),
            rows: 0,
        })
    }

    /// Adds one row, formatted as it appears in the report's `processes` array.
    pub fn push(&mut self, row: &ProcessRow) -> Result<()> {
        if self.rows > 0 {
            self.file.write_all(b",\n")?;
        }
        let text = serde_json::to_string_pretty(row)?;
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                self.file.write_all(b"\n")?;
            }
            self.file.write_all(b"    ")?;
            self.file.write_all(line.as_bytes())?;
        }
        self.rows += 1;
        Ok(())
    }
}

/// The report as JSON, with the rows of `rows` (when given) as its `processes` array: the
/// same document as `write` of a report that holds them.
pub fn write_with_rows(report: &Report, rows: Option<RowSpool>, out: &mut dyn Write) -> Result<()> {
    let Some(rows) = rows else {
        return write(report, out);
    };
    // Written as it is serialized (a report of many groups is hundreds of MB of JSON), but
    // for its closing "\n}", after which the rows go.
    let mut head = HoldLast {
        out: &mut *out,
        held: Vec::new(),
    };
    serde_json::to_writer_pretty(&mut head, report)?;
    anyhow::ensure!(head.held == b"\n}", "the report is not a JSON object");
    if rows.rows == 0 {
        out.write_all(b",\n  \"processes\": []\n}\n")?;
        return Ok(());
    }
    out.write_all(b",\n  \"processes\": [\n")?;
    let mut file = rows
        .file
        .into_inner()
        .map_err(|e| anyhow::anyhow!("cannot write the rows: {}", e.error()))?;
    use std::io::Seek as _;
    file.seek(std::io::SeekFrom::Start(0))?;
    std::io::copy(&mut file, out)?;
    out.write_all(b"\n  ]\n}\n")?;
    Ok(())
}

/// Passes what is written on to `out`, but for the last `HELD` bytes so far, which it holds.
struct HoldLast<'w> {
    out: &'w mut dyn Write,
    held: Vec<u8>,
}

const HELD: usize = 2;

impl Write for HoldLast<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.held.extend_from_slice(buf);
        if self.held.len() > HELD {
            let pass = self.held.len() - HELD;
            self.out.write_all(&self.held[..pass])?;
            self.held.drain(..pass);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
