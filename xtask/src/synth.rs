//! `cargo xtask synth-recording`: a synthetic recording of N processes, written by the
//! sqlite3 shell from the real schema (forkprof/src/recording/schema.sql), for benchmarking
//! `forkprof report` at sizes no test run produces.
//!
//! Shape: a tree (each process's parent is process i/8), fork and posix_spawn alternating,
//! 50 distinct binaries, one successful exec each plus a failed PATH-search attempt for one
//! process in four, a complete dynamic-linker window and an exit. The root (pid 1000) existed
//! before tracing: its label is in `found`. Written with
//! `RECORDING_SCHEMA`'s columns: the unit test below fails when the schema grows a column.
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    /// Number of processes.
    #[arg(long, default_value_t = 1_000_000)]
    pub processes: u64,
    /// The recording to write (replaced if it exists).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

pub fn run(args: &SynthArgs) -> Result<()> {
    let schema = std::fs::read_to_string(crate::root().join("forkprof/src/recording/schema.sql"))?;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = args.output.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    let n = args.processes;
    let sql = format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;
BEGIN;
{schema}
INSERT INTO meta VALUES ('schema_version','5'),('mode','synthetic'),('host','synthetic'),
  ('wall_ns','{wall}'),('lost_ringbuf_full','0'),('lost_state_map_full','0'),('lost_undecodable','0');
CREATE TEMP TABLE ids AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < {n}) SELECT i FROM c;
INSERT INTO spawns SELECT 1000+i, i*1000, i*1000+60000, 1000+i/8, (i/8)*1000, 1000+i/8, 1000+i,
  CASE WHEN i%2=0 THEN 'fork' ELSE 'posix_spawn' END, CASE WHEN i%2=0 THEN 56 ELSE 435 END,
  CASE WHEN i%2=0 THEN 17 ELSE 16640 END, 0, i*1000-5, 40000+i%1000, CASE WHEN i%2=0 THEN 30000 ELSE 0 END,
  CASE WHEN i%2=0 THEN 0 ELSE 300000 END, 'make', 100+i%10 FROM ids;
INSERT INTO execs SELECT 1000+i, i*1000, i*1000+70000, 1000+i, '/usr/local/bin/tool'||(i%50), 'tool'||(i%50),
  1, 2, 20000, 0, 0, 0, 0, 0, 15000, 0, 100+i%10 FROM ids WHERE i%4=0;
INSERT INTO execs SELECT 1000+i, i*1000, i*1000+200000, 1000+i, '/usr/bin/tool'||(i%50),
  'tool'||(i%50)||char(0)||'-c'||char(0)||'input'||i||'.c', 3, 0, 150000+i%5000, 40000, 100000, 0, 0, i%7,
  CASE WHEN i%4=0 THEN 0 ELSE 15000 END, 0, 100+i%10 FROM ids;
INSERT INTO lds SELECT 1000+i, i*1000, i*1000+1200000, 'complete', 3+i%5, 40, 800000, 100000+(i%50)*1000, 90000, 0, 0, 0 FROM ids;
INSERT INTO found VALUES (1000, '/usr/bin/make', '/usr/bin/bash');
INSERT INTO cgroups SELECT 100+i%10, '/system.slice/ci-runner.service/job-'||(i%10) FROM ids WHERE i <= 10;
INSERT INTO exits SELECT 1000+i, i*1000, i*1000+3000000, 0, 1, 50000, 0, i*1000+2950000, 'tool'||(i%50), 0, 0 FROM ids;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
",
        wall = n * 1000 + 3_000_000
    );
    let mut child = Command::new("sqlite3")
        .arg(&args.output)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("sqlite3 (apt-get install sqlite3)")?;
    use std::io::Write as _;
    child
        .stdin
        .take()
        .context("sqlite3 stdin")?
        .write_all(sql.as_bytes())?;
    let status = child.wait()?;
    if !status.success() {
        bail!("sqlite3 failed: {status}");
    }
    eprintln!(
        "xtask: wrote {n} synthetic processes to {}",
        args.output.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated rows fit the real schema (sqlite3 reports a wrong column count as a
    /// parse error and exits 1).
    #[test]
    fn fits_the_schema() {
        let dir = std::env::temp_dir().join(format!("xtask-synth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("s.db");
        run(&SynthArgs {
            processes: 100,
            output: db.clone(),
        })
        .unwrap();
        let count = |sql: &str| {
            let out = Command::new("sqlite3").arg(&db).arg(sql).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        assert_eq!(count("SELECT count(*) FROM spawns"), "100");
        assert_eq!(count("SELECT count(*) FROM execs"), "125");
        assert_eq!(count("SELECT count(*) FROM exits"), "100");
        assert_eq!(count("SELECT binary FROM found"), "/usr/bin/make");
        // Every cgroup id the rows carry has a name.
        assert_eq!(
            count("SELECT count(*) FROM spawns WHERE cgroup_id NOT IN (SELECT id FROM cgroups)"),
            "0"
        );
        assert_eq!(count("SELECT count(*) FROM cgroups"), "10");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
