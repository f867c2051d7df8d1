//! `forkprof report` on a fixed recording (tests/fixtures/demo.db, `forkprof run -o` of
//! `fp-workload demo`) gives byte-for-byte the outputs in tests/fixtures/golden/: the table,
//! JSON, CSV, folded stacks and the Perfetto timeline. A refactor that changes any number,
//! key or order fails here. `FORKPROF_UPDATE_GOLDEN=1 cargo test -p forkprof --test golden`
//! rewrites them after an intended change (review the diff). Needs no root.
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A private copy of the recording: reading it may leave SQLite files beside it.
fn recording(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("forkprof-golden-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("demo.db");
    std::fs::copy(fixtures().join("demo.db"), &db).unwrap();
    (dir, db)
}

fn check(name: &str, actual: &[u8]) {
    let golden = fixtures().join("golden").join(name);
    if std::env::var_os("FORKPROF_UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, actual).unwrap();
        return;
    }
    let expected = std::fs::read(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (FORKPROF_UPDATE_GOLDEN=1 writes it)",
            golden.display()
        )
    });
    if actual != expected.as_slice() {
        let got = std::env::temp_dir().join(format!("forkprof-golden-{name}"));
        std::fs::write(&got, actual).unwrap();
        panic!(
            "{name} differs from {}; the new output is in {} (diff them)",
            golden.display(),
            got.display()
        );
    }
}

/// Runs `forkprof report DB ARGS` and checks its stdout against `name`.
fn report(name: &str, args: &[&str]) {
    let (dir, db) = recording(name);
    let out = Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .arg("report")
        .arg(&db)
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check(name, &out.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn table() {
    report("table.txt", &[]);
}

#[test]
fn json_with_processes() {
    report("processes.json", &["--format", "json", "--processes"]);
}

#[test]
fn by_parent_json() {
    report("by_parent.json", &["--by", "parent", "--format", "json"]);
}

#[test]
fn by_method_csv() {
    report("by_method.csv", &["--by", "method", "--format", "csv"]);
}

#[test]
fn processes_csv() {
    report("processes.csv", &["--format", "csv", "--processes"]);
}

/// A process as both outputs give it: pid, binary, method, and its phases by name.
type ProcessKey = (u64, String, String, Vec<(String, u64)>);

/// `--format csv --processes` has a row for each process the same selection puts in the
/// JSON's `processes`, with the same binary, method and phases.
#[test]
fn processes_csv_rows_are_the_json_processes() {
    let (dir, db) = recording("csv-json");
    let selection = ["--filter", "true", "--from", "100ms", "--to", "500ms"];
    let out = |format: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_forkprof"))
            .arg("report")
            .arg(&db)
            .args(selection)
            .args(["--processes", "--format", format])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let json: serde_json::Value = serde_json::from_slice(&out("json")).unwrap();
    let mut from_json: Vec<ProcessKey> = json["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let phases = p["phases"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
                .collect();
            (
                p["pid"].as_u64().unwrap(),
                p["binary"].as_str().unwrap().to_string(),
                p["method"].as_str().unwrap().to_string(),
                phases,
            )
        })
        .collect();
    let csv = String::from_utf8(out("csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let first_phase = col("fork");
    let mut from_csv: Vec<ProcessKey> = lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), header.len(), "{line}");
            let mut phases: Vec<(String, u64)> = (first_phase..header.len())
                .filter(|&i| !f[i].is_empty())
                .map(|i| (header[i].to_string(), f[i].parse().unwrap()))
                .collect();
            phases.sort();
            (
                f[col("pid")].parse().unwrap(),
                f[col("binary")].to_string(),
                f[col("method")].to_string(),
                phases,
            )
        })
        .collect();
    from_json.sort();
    from_csv.sort();
    assert!(!from_csv.is_empty(), "the selection holds processes");
    assert_eq!(from_csv, from_json);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn by_ancestry_sorted_and_cut() {
    report(
        "ancestry.json",
        &[
            "--by", "ancestry", "--sort", "p99", "--top", "5", "--format", "json",
        ],
    );
}

#[test]
fn filtered_by_binary_and_time() {
    report(
        "filtered.json",
        &[
            "--filter", "true", "--from", "100ms", "--to", "500ms", "--format", "json",
        ],
    );
}

#[test]
fn folded_stacks_and_perfetto() {
    let (dir, db) = recording("files");
    let (folded, perfetto) = (dir.join("out.folded"), dir.join("out.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .arg("report")
        .arg(&db)
        .arg("--folded")
        .arg(&folded)
        .arg("--perfetto")
        .arg(&perfetto)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check("folded.txt", &std::fs::read(&folded).unwrap());
    check("perfetto.json", &std::fs::read(&perfetto).unwrap());
    let _ = std::fs::remove_dir_all(dir);
}

/// The columns of `table`.
fn columns(conn: &rusqlite::Connection, table: &str) -> Vec<String> {
    let s = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
    s.column_names().iter().map(|c| c.to_string()).collect()
}

/// Every row of `table` (its `cols`), as text, in the order written.
fn rows(conn: &rusqlite::Connection, table: &str, cols: &[String]) -> Vec<String> {
    let mut s = conn
        .prepare(&format!(
            "SELECT {} FROM {table} ORDER BY rowid",
            cols.join(", ")
        ))
        .unwrap();
    let n = s.column_count();
    s.query_map([], |r| {
        Ok((0..n)
            .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
            .collect::<Vec<_>>()
            .join("|"))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// The fixture's records written again by the recording writer give the same rows: the
/// recording format is unchanged, but for columns added since the fixture's schema (which
/// the reader reads as 0). (The derived `phases` table follows the report's definitions,
/// which may change; the `processes` table must not.)
#[test]
fn records_written_again_give_the_same_recording() {
    use forkprof::model::{Report, report::Context};
    use forkprof::recording::{Recording, Writer};

    let (dir, db) = recording("rewrite");
    let original = Recording::open(&db).unwrap();
    let copy = dir.join("copy.db");
    let writer = Writer::create(&copy, None, vec![], true).unwrap();
    original.records(&mut |r| writer.record(r)).unwrap();
    let trace = original.load(true).unwrap();
    let mut ctx = Context::for_run(&|_| false);
    ctx.processes = true;
    let report = Report::build(&trace, &ctx);
    writer.finish(&trace.lost, &report, vec![]).unwrap();
    let (a, b) = (
        rusqlite::Connection::open(&db).unwrap(),
        rusqlite::Connection::open(&copy).unwrap(),
    );
    for table in ["spawns", "execs", "lds", "exits", "processes"] {
        let cols = columns(&a, table);
        let (want, got) = (rows(&a, table, &cols), rows(&b, table, &cols));
        assert!(!want.is_empty(), "{table}: the fixture has rows");
        assert_eq!(want, got, "{table}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A finished recording is read without writing beside it (no -wal or -shm file appears),
/// so a user who may only read it, in a folder they cannot write, can report it. It used to
/// fail as "corrupt recording: attempt to write a readonly database".
#[test]
fn a_read_only_recording_reads_and_nothing_is_written_beside_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let (dir, db) = recording("read-only");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .arg("report")
        .arg(&db)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(left, ["demo.db"], "files beside the recording");
    let _ = std::fs::remove_dir_all(dir);
}

/// A selection that holds no process gives the header and one line, not a page of empty
/// tables, and says on stderr which flags matched nothing; JSON stays whole.
#[test]
fn an_empty_selection_is_one_line() {
    let (dir, db) = recording("empty-selection");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_forkprof"))
            .arg("report")
            .arg(&db)
            .args(args)
            .env_remove("COLUMNS")
            .output()
            .unwrap()
    };
    let out = run(&["--filter", "no-such-binary", "--from", "1ms"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("processes 0 ")
            && stdout.ends_with("  no processes: no phases, groups or hints to show\n")
            && !stdout.contains("Phases"),
        "{stdout}"
    );
    assert_eq!(
        stderr,
        format!(
            "forkprof: no process in {} matches --filter \"no-such-binary\" --from 1ms\n",
            db.display()
        )
    );
    let json = run(&["--filter", "no-such-binary", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["summary"]["processes"], 0);
    assert!(v["phases"].is_object() && v["groups"].is_object(), "{v}");
    let _ = std::fs::remove_dir_all(dir);
}
