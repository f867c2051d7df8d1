//! `forkprof export FILE --parquet OUT` read back by DuckDB (its Python package, which
//! `cargo xtask setup` installs): per-binary counts and total spawn cost equal
//! `report --format json`'s, and the files of two hosts read as their union. Needs no root.
//! Without DuckDB these tests print a skip line, or fail when `FORKPROF_REQUIRE_DUCKDB=1`
//! or `FORKPROF_REQUIRE_ROOT=1` is set (`cargo xtask test` sets the latter), so that CI never
//! skips them silently.
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A fresh directory with private copies of `recordings` (reading one may leave SQLite
/// files beside it).
fn tempdir(test: &str, recordings: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("forkprof-export-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for r in recordings {
        let name = Path::new(r).file_name().unwrap();
        std::fs::copy(fixture(r), dir.join(name)).unwrap();
    }
    dir
}

fn forkprof(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .args(args)
        .output()
        .unwrap()
}

fn export(db: &Path, out: &Path, extra: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .arg("export")
        .arg(db)
        .arg("--parquet")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "export {}: {}",
        db.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether DuckDB's Python package can be imported. Without it, under
/// `FORKPROF_REQUIRE_DUCKDB=1` or `FORKPROF_REQUIRE_ROOT=1` the test fails; otherwise it
/// prints `skipped: TEST: needs DuckDB ...` straight to stderr (past the harness's capture),
/// and the test returns.
fn duckdb_or_skip(test: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    assert!(
        !(flag("FORKPROF_REQUIRE_DUCKDB") || flag("FORKPROF_REQUIRE_ROOT")),
        "{test}: `python3 -c 'import duckdb'` fails, and FORKPROF_REQUIRE_DUCKDB or \
         FORKPROF_REQUIRE_ROOT is set: install it with `cargo xtask setup` (python3 -m pip \
         install duckdb)"
    );
    let line = format!(
        "skipped: {test}: needs DuckDB for Python to read the Parquet file (cargo xtask setup \
         installs it)\n"
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

/// Runs `sql` in DuckDB and returns its rows as JSON arrays (integers exact: DuckDB's
/// HUGEINT sums become Python ints).
fn duckdb(sql: &str) -> Vec<Vec<Value>> {
    const SCRIPT: &str = "import duckdb, json, sys\n\
                          rows = duckdb.sql(sys.argv[1]).fetchall()\n\
                          print(json.dumps([list(r) for r in rows]))";
    let o = Command::new("python3")
        .args(["-c", SCRIPT, sql])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "duckdb: {sql}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A path as an SQL string literal.
fn lit(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "''"))
}

fn int(v: &Value) -> Option<u64> {
    v.as_u64()
}

#[test]
fn duckdb_per_binary_counts_and_spawn_cost_equal_the_report() {
    if !duckdb_or_skip("duckdb_per_binary_counts_and_spawn_cost_equal_the_report") {
        return;
    }
    let dir = tempdir("per-binary", &["demo.db"]);
    let (db, out) = (dir.join("demo.db"), dir.join("demo.parquet"));
    export(&db, &out, &[]);
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{:o}", mode);

    let report = forkprof(&[Path::new("report"), &db, Path::new("--format=json")]);
    assert!(report.status.success());
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    // binary -> (processes, total spawn_cost). A group of no processes (a path exec'd by a
    // process that exec'd again) counts execs only: it has no rows in the file.
    let expected: BTreeMap<String, (u64, Option<u64>)> = report["groups"]["binary"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["processes"].as_u64() > Some(0))
        .map(|g| {
            (
                g["binary"].as_str().unwrap().to_string(),
                (
                    g["processes"].as_u64().unwrap(),
                    g["phases"]["spawn_cost"]["total"].as_u64(),
                ),
            )
        })
        .collect();
    let rows = duckdb(&format!(
        "SELECT \"binary\", count(*), sum(spawn_cost) FROM {} GROUP BY \"binary\"",
        lit(&out)
    ));
    let actual: BTreeMap<String, (u64, Option<u64>)> = rows
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_string(),
                (int(&r[1]).unwrap(), int(&r[2])),
            )
        })
        .collect();
    assert_eq!(actual, expected);
    assert!(expected.len() >= 3, "{expected:?}");

    // The whole file: the report's process count and spawn cost over all phases.
    let all = duckdb(&format!(
        "SELECT count(*), sum(spawn_cost), sum(failed_execs), count(DISTINCT host), \
         min(host) FROM {}",
        lit(&out)
    ));
    assert_eq!(int(&all[0][0]), report["summary"]["processes"].as_u64());
    assert_eq!(
        int(&all[0][1]),
        report["phases"]["spawn_cost"]["total"].as_u64()
    );
    assert_eq!(int(&all[0][2]), report["summary"]["failed_execs"].as_u64());
    // The host from the recording's meta.
    assert_eq!(all[0][3], 1);
    assert_eq!(all[0][4], "vm");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn duckdb_reads_the_files_of_two_hosts_as_their_union() {
    if !duckdb_or_skip("duckdb_reads_the_files_of_two_hosts_as_their_union") {
        return;
    }
    let dir = tempdir("union", &["demo.db", "diff/before.db"]);
    let fleet = dir.join("fleet");
    std::fs::create_dir(&fleet).unwrap();
    let (a, b) = (fleet.join("a.parquet"), fleet.join("b.parquet"));
    export(&dir.join("demo.db"), &a, &["--host", "host-a"]);
    export(&dir.join("before.db"), &b, &["--host", "host-b"]);
    let count = |from: &str| int(&duckdb(&format!("SELECT count(*) FROM {from}"))[0][0]).unwrap();
    let (na, nb) = (count(&lit(&a)), count(&lit(&b)));
    assert!(na > 0 && nb > 0);
    let glob = lit(&fleet.join("*.parquet"));
    assert_eq!(count(&glob), na + nb);
    assert_eq!(
        count(&format!("read_parquet([{}, {}])", lit(&a), lit(&b))),
        na + nb
    );
    let by_host = duckdb(&format!(
        "SELECT host, count(*), sum(spawn_cost) FROM {glob} GROUP BY host ORDER BY host"
    ));
    let processes = |db: &str| {
        let out = forkprof(&[
            Path::new("report"),
            &dir.join(db),
            Path::new("--format=json"),
        ]);
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            r["summary"]["processes"].as_u64().unwrap(),
            r["phases"]["spawn_cost"]["total"].as_u64().unwrap(),
        )
    };
    let want = [
        ("host-a", processes("demo.db")),
        ("host-b", processes("before.db")),
    ];
    assert_eq!(by_host.len(), 2, "{by_host:?}");
    for (row, (host, (n, cost))) in by_host.iter().zip(want) {
        assert_eq!(row[0], host);
        assert_eq!(int(&row[1]), Some(n), "{host}");
        assert_eq!(int(&row[2]), Some(cost), "{host}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `report --format csv --processes` holds the rows of the Parquet export, value for value:
/// DuckDB reads the CSV with the Parquet file's column types, and each side less the other
/// is empty.
#[test]
fn duckdb_reads_the_process_csv_as_the_parquet_rows() {
    if !duckdb_or_skip("duckdb_reads_the_process_csv_as_the_parquet_rows") {
        return;
    }
    let dir = tempdir("csv", &["demo.db"]);
    let (db, parquet, csv) = (
        dir.join("demo.db"),
        dir.join("demo.parquet"),
        dir.join("demo.csv"),
    );
    export(&db, &parquet, &[]);
    let o = forkprof(&[
        Path::new("report"),
        &db,
        Path::new("--format=csv"),
        Path::new("--processes"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(&csv, &o.stdout).unwrap();
    // The CSV read with the Parquet file's names and types (an empty field is a null).
    let types = duckdb(&format!("DESCRIBE SELECT * FROM {}", lit(&parquet)))
        .iter()
        .map(|r| format!("'{}': '{}'", r[0].as_str().unwrap(), r[1].as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(", ");
    let from_csv = format!(
        "read_csv({}, header = true, auto_detect = false, columns = {{{types}}})",
        lit(&csv)
    );
    let count = |sql: &str| int(&duckdb(sql)[0][0]).unwrap();
    let rows = count(&format!("SELECT count(*) FROM {from_csv}"));
    assert_eq!(
        rows,
        count(&format!("SELECT count(*) FROM {}", lit(&parquet)))
    );
    assert!(rows > 10, "{rows}");
    for (a, b) in [(&from_csv, &lit(&parquet)), (&lit(&parquet), &from_csv)] {
        let only = format!("SELECT count(*) FROM (FROM {a} EXCEPT ALL FROM {b})");
        assert_eq!(count(&only), 0, "{only}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Needs no DuckDB: bad input is refused as `report` and `record -o` refuse it.
#[test]
fn bad_recordings_and_existing_outputs_are_refused() {
    let dir = tempdir("refused", &["demo.db"]);
    let db = dir.join("demo.db");
    let out = dir.join("out.parquet");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_forkprof"))
            .arg("export")
            .args(args)
            .output()
            .unwrap()
    };
    let refused = |o: &Output, says: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let missing = dir.join("missing.db");
    refused(&run(&[&s(&missing), "--parquet", &s(&out)]), "missing.db");
    let corrupt = dir.join("corrupt.db");
    std::fs::write(&corrupt, b"not a recording at all, not even SQLite").unwrap();
    refused(&run(&[&s(&corrupt), "--parquet", &s(&out)]), "corrupt.db");
    assert!(!out.exists(), "nothing is written for a bad recording");

    std::fs::write(&out, b"an earlier export").unwrap();
    refused(&run(&[&s(&db), "--parquet", &s(&out)]), "--force");
    assert_eq!(std::fs::read(&out).unwrap(), b"an earlier export");
    let o = run(&[&s(&db), "--parquet", &s(&out), "--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"PAR1");
    // Never the recording itself, even with --force.
    refused(
        &run(&[&s(&db), "--parquet", &s(&db), "--force"]),
        "is the recording",
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        std::fs::read(fixture("demo.db")).unwrap()
    );
    let _ = std::fs::remove_dir_all(dir);
}
