//! The report as JSON (`--json`, `--format json`).
use std::io::Write;

use anyhow::Result;

use crate::model::Report;

/// One JSON document; keys are documented in the README and stable within a schema version.
pub fn write(report: &Report, out: &mut dyn Write) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)?;
    Ok(())
}
