//! `cargo xtask synth-recording`: a synthetic recording of N processes, written by the
//! sqlite3 shell from the real schema (forkprof/src/recording/schema.sql), for benchmarking
//! `forkprof report` at sizes no test run produces.
//!
//! Shape: a build. The root (pid 1000, `make`) existed before tracing: its label is in
//! `found`. It starts 10 sub-makes that run to the end. They start jobs, one every
//! `SPACING_NS` (10,000 spawns a second): a `sh` that starts one tool (50 distinct binaries)
//! and ends 3 ms after it started, its tool 2 ms after. Fork and posix_spawn alternate; each
//! process execs once, a tool after a failed PATH-search attempt one time in two, and has a
//! complete dynamic-linker window and an exit. Each table's rows are in time order, as
//! forkprof writes them (in the order the kernel hands them over). Written with
//! `RECORDING_SCHEMA`'s columns: the unit test below fails when the schema grows a column.
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

/// Time between two spawns.
pub const SPACING_NS: u64 = 100_000;

#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    /// Number of processes.
    #[arg(long, default_value_t = 1_000_000)]
    pub processes: u64,
    /// Number of distinct tool binaries the jobs run (the report groups by binary).
    #[arg(long, default_value_t = 50)]
    pub binaries: u64,
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
INSERT INTO meta VALUES ('schema_version','8'),('mode','synthetic'),('host','synthetic'),
  ('wall_ns','{wall}'),('lost_ringbuf_full','0'),('lost_state_map_full','0'),('lost_undecodable','0');
CREATE TEMP TABLE ids AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < {n}) SELECT i FROM c;
INSERT INTO spawns SELECT 1000+i, i*{d}, i*{d}+60000, 1000+{parent}, ({parent})*{d}, 1000+{parent}, 1000+i,
  CASE WHEN i%2=0 THEN 'fork' ELSE 'posix_spawn' END, CASE WHEN i%2=0 THEN 56 ELSE 435 END,
  CASE WHEN i%2=0 THEN 17 ELSE 16640 END, 0, i*{d}-5, 40000+i%1000, CASE WHEN i%2=0 THEN 30000 ELSE 0 END,
  CASE WHEN i%2=0 THEN 0 ELSE 300000 END, CASE WHEN i<=10 OR i%2=1 THEN 'make' ELSE 'sh' END, 100+i%10 FROM ids;
INSERT INTO execs SELECT * FROM (
  SELECT 1000+i, i*{d}, i*{d}+70000 AS ts, 1000+i, '/usr/local/bin/tool'||((i/2)%{tools}), 'tool'||((i/2)%{tools}),
    1, 2, 20000, 0, 0, 0, 0, 0, 15000, 0, 100+i%10 FROM ids WHERE i%4=0 AND i>10
  UNION ALL
  SELECT 1000+i, i*{d}, i*{d}+200000, 1000+i, {binary},
    {binary}||char(0)||'-c'||char(0)||'input'||i||'.c', 3, 0, 150000+i%5000, 40000, 100000, 0, 0, i%7,
    CASE WHEN i%4=0 THEN 0 ELSE 15000 END, 0, 100+i%10 FROM ids)
  ORDER BY ts;
INSERT INTO lds SELECT 1000+i, i*{d}, i*{d}+1200000, 'complete', 3+i%5, 40, 800000, 100000+(i%50)*1000, 90000, 0, 0, 0, 2+i%5 FROM ids;
INSERT INTO found VALUES (1000, 0, '/usr/bin/make', '/usr/bin/bash');
INSERT INTO cgroups SELECT 100+i%10, '/system.slice/ci-runner.service/job-'||(i%10) FROM ids WHERE i <= 10;
INSERT INTO exits SELECT 1000+i, i*{d}, {exit}, 0, 1, 50000, 0, {exit}-50000, replace({binary}, rtrim({binary}, replace({binary}, '/', '')), ''), 0, 0, 100+i%10 FROM ids
  ORDER BY {exit};
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
",
        wall = n * SPACING_NS + 6_000_000,
        d = SPACING_NS,
        tools = args.binaries.max(1),
        parent = "CASE WHEN i<=10 THEN 0 WHEN i%2=1 THEN 1+i%10 ELSE i-1 END",
        binary = format!(
            "CASE WHEN i<=10 THEN '/usr/bin/make' WHEN i%2=1 THEN '/bin/sh' \
             ELSE '/usr/bin/tool'||((i/2)%{tools}) END",
            tools = args.binaries.max(1)
        ),
        exit = format!(
            "CASE WHEN i<=10 THEN {end} WHEN i%2=1 THEN i*{SPACING_NS}+3000000 \
             ELSE i*{SPACING_NS}+2000000 END",
            end = n * SPACING_NS + 5_000_000
        ),
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
            binaries: 50,
            output: db.clone(),
        })
        .unwrap();
        let count = |sql: &str| {
            let out = Command::new("sqlite3").arg(&db).arg(sql).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        assert_eq!(count("SELECT count(*) FROM spawns"), "100");
        // One exec each, and a failed attempt before it for the tools with i % 4 == 0
        // (i > 10): 25 - 2.
        assert_eq!(count("SELECT count(*) FROM execs"), "123");
        // A parent outlives its children, as in a real tree: none exits before a child of
        // its was created, or before a child of its exited.
        assert_eq!(
            count(
                "SELECT count(*) FROM spawns c JOIN exits pe ON pe.pid = c.parent_pid \
                 JOIN exits ce ON ce.pid = c.pid \
                 WHERE pe.ts_ns < c.ts_ns OR pe.ts_ns < ce.ts_ns"
            ),
            "0"
        );
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
