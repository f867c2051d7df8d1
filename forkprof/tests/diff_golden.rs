//! `forkprof diff` on two fixed synthetic recordings (tests/fixtures/diff/) against goldens.
//!
//! The recordings are written by `write_fixtures` from SQL with deterministic values: a
//! dynamic `cc` whose dynamic linking got cheaper, an `ld` drawn alike in both, `sh` only
//! before, a static-looking `cc-static` only after, and a `tiny` with 3 processes a side.
//! `FORKPROF_UPDATE_GOLDEN=1 cargo test -p forkprof --test diff_golden` rewrites the
//! recordings and the goldens (review the diff). Needs no root.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/diff")
}

fn updating() -> bool {
    std::env::var_os("FORKPROF_UPDATE_GOLDEN").is_some()
}

/// One group of a synthetic recording: `n` processes of `binary`, costs in µs.
struct Group {
    binary: &'static str,
    n: u64,
    exec_us: u64,
    /// ld_start, ld_map, ld_reloc_init (a "complete" dynamic-linker window), or None for a
    /// static binary (no_glibc_ld with a static_start).
    ld_us: Option<[u64; 3]>,
}

/// The SQL that writes `groups` with the real schema; `seed` shifts the noise.
fn sql(groups: &[Group], seed: u64) -> String {
    let mut s = format!(
        "PRAGMA journal_mode=DELETE;\nBEGIN;\n{}\nINSERT INTO meta VALUES ('schema_version','{}'),\
         ('mode','synthetic'),('host','synthetic'),('wall_ns','1000000000'),\
         ('lost_ringbuf_full','0'),('lost_state_map_full','0'),('lost_undecodable','0');\n",
        forkprof::recording::SCHEMA,
        forkprof::recording::RECORDING_SCHEMA
    );
    let mut first = 2000u64;
    for g in groups {
        // A factor from 0.70 to 1.29, spread over the processes, per process and column.
        // Multipliers prime to 60, so that every column takes all 60 factors.
        const MUL: [u64; 8] = [7919, 7921, 7933, 7937, 7949, 7951, 7963, 7993];
        let noise = |salt: usize| {
            format!(
                "(70 + ((i * {} + {}) % 60)) / 100.0",
                MUL[salt],
                seed * 104_729 + salt as u64
            )
        };
        let us = |v: u64, salt: usize| format!("CAST({v} * 1000 * {} AS INTEGER)", noise(salt));
        let (lo, hi) = (first, first + g.n - 1);
        let ids = format!(
            "WITH RECURSIVE c(i) AS (SELECT {lo} UNION ALL SELECT i+1 FROM c WHERE i < {hi}) SELECT i FROM c"
        );
        s += &format!(
            "INSERT INTO spawns SELECT i, i*1000000, i*1000000+60000, 1000, 0, 1000, i, 'fork', 56, 17, 0, \
             i*1000000-5, {}, 20000, 0, 'make', 0 FROM ({ids});\n",
            us(40, 1)
        );
        s += &format!(
            "INSERT INTO execs SELECT i, i*1000000, i*1000000+200000, i, '{}', '{}', 1, 0, {}, 40000, 90000, \
             0, 0, 3, 15000, 0, 0 FROM ({ids});\n",
            g.binary,
            g.binary.rsplit('/').next().unwrap_or(g.binary),
            us(g.exec_us, 2)
        );
        s += &match g.ld_us {
            Some([start, map, reloc]) => format!(
                "INSERT INTO lds SELECT i, i*1000000, i*1000000+500000, 'complete', 4, 40, {}, {}, {}, 0, 0, 0, 3 FROM ({ids});\n",
                us(start, 3),
                us(map, 4),
                us(reloc, 5)
            ),
            None => format!(
                "INSERT INTO lds SELECT i, i*1000000, i*1000000+500000, 'no_glibc_ld', 0, 10, 0, 0, 0, 0, 0, {}, 0 FROM ({ids});\n",
                us(60, 6)
            ),
        };
        s += &format!(
            "INSERT INTO exits SELECT i, i*1000000, i*1000000+900000, 0, 1, {}, 2, i*1000000+850000, '{}', 0, 0, 0 FROM ({ids});\n",
            us(50, 7),
            g.binary.rsplit('/').next().unwrap_or(g.binary)
        );
        first += g.n;
    }
    s + "COMMIT;\n"
}

fn group(binary: &'static str, n: u64, exec_us: u64, ld_us: Option<[u64; 3]>) -> Group {
    Group {
        binary,
        n,
        exec_us,
        ld_us,
    }
}

/// Writes before.db and after.db (only under FORKPROF_UPDATE_GOLDEN).
fn write_fixtures() {
    let before = [
        group("/opt/synth/cc", 120, 150, Some([100, 300, 150])),
        group("/opt/synth/ld", 80, 120, Some([90, 30, 20])),
        group("/bin/sh", 40, 200, Some([90, 40, 30])),
        group("/opt/synth/tiny", 3, 100, Some([90, 60, 40])),
    ];
    let after = [
        group("/opt/synth/cc", 120, 150, Some([50, 30, 20])),
        group("/opt/synth/ld", 80, 120, Some([90, 30, 20])),
        group("/opt/synth/cc-static", 50, 140, None),
        group("/opt/synth/tiny", 3, 100, Some([90, 60, 40])),
    ];
    std::fs::create_dir_all(fixtures()).unwrap();
    for (name, groups, seed) in [("before.db", &before, 1), ("after.db", &after, 2)] {
        let path = fixtures().join(name);
        let _ = std::fs::remove_file(&path);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&sql(groups, seed)).unwrap();
    }
}

/// Private copies of the recordings: reading them may leave SQLite files beside them.
fn copies(test: &str) -> (PathBuf, PathBuf, PathBuf) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if updating() {
        ONCE.call_once(write_fixtures);
    }
    let dir = std::env::temp_dir().join(format!("forkprof-diff-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (b, a) = (dir.join("before.db"), dir.join("after.db"));
    std::fs::copy(fixtures().join("before.db"), &b).unwrap();
    std::fs::copy(fixtures().join("after.db"), &a).unwrap();
    (dir, b, a)
}

fn forkprof_diff(dir: &Path, args: &[&str]) -> Output {
    // Relative names, so the output does not depend on the temporary directory.
    Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .arg("diff")
        .args(args)
        .current_dir(dir)
        .env_remove("COLUMNS")
        .output()
        .unwrap()
}

/// Compares with the golden `name` (or rewrites it); a difference is left in the temp dir.
fn check(name: &str, actual: &[u8]) {
    let golden = fixtures().join(name);
    if updating() {
        return std::fs::write(&golden, actual).unwrap();
    }
    let expected = std::fs::read(&golden).unwrap_or_default();
    let got = std::env::temp_dir().join(format!("forkprof-diff-golden-{name}"));
    if actual != expected.as_slice() {
        std::fs::write(&got, actual).unwrap();
    }
    assert!(
        actual == expected.as_slice(),
        "{name}: differs from {} (new output in {}; FORKPROF_UPDATE_GOLDEN=1 rewrites)",
        golden.display(),
        got.display()
    );
}

fn golden(name: &str, args: &[&str]) {
    let (dir, _, _) = copies(name);
    let mut all = vec!["before.db", "after.db"];
    all.extend(args);
    let out = forkprof_diff(&dir, &all);
    succeeded(&out);
    check(name, &out.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn table() {
    golden("table.txt", &[]);
}

#[test]
fn json() {
    golden("diff.json", &["--format", "json"]);
}

#[test]
fn csv() {
    golden("diff.csv", &["--format", "csv"]);
}

#[test]
fn json_says_what_changed() {
    let (dir, _, _) = copies("shape");
    let out = forkprof_diff(&dir, &["before.db", "after.db", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = |g: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["group"] == g)
            .map(|r| r["status"].as_str().unwrap().to_string())
    };
    assert_eq!(status("/opt/synth/cc").as_deref(), Some("changed"));
    assert_eq!(
        status("/opt/synth/ld").as_deref(),
        Some("no significant change")
    );
    assert_eq!(status("/bin/sh").as_deref(), Some("gone"));
    assert_eq!(status("/opt/synth/cc-static").as_deref(), Some("new"));
    assert_eq!(
        status("/opt/synth/tiny").as_deref(),
        Some("too few processes")
    );
    let cc = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["group"] == "/opt/synth/cc")
        .unwrap();
    assert_eq!(cc["moved_phase"], "ld_map");
    let ci = cc["ci"].as_array().unwrap();
    assert!(ci[1].as_f64().unwrap() < 0.9, "{cc}");
    let hint = &v["hints"][0];
    assert_eq!(hint["rule"], "dynamic_linking");
    assert_eq!(hint["status"], "resolved");
    assert!(hint["saved_ns"].as_i64().unwrap() > 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// Same recording on both sides: nothing changed.
#[test]
fn a_recording_against_itself_has_no_change() {
    let (dir, _, _) = copies("itself");
    let out = forkprof_diff(&dir, &["before.db", "before.db", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for r in v["rows"].as_array().unwrap() {
        assert!(
            r["status"] == "no significant change" || r["status"] == "too few processes",
            "{r}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A copy of fixture `from` as `to` in `dir`, as if the machine ran its dynamic linking
/// `factor` times slower (a VM's speed drifting between runs).
fn drifted(dir: &Path, from: &str, to: &str, factor: f64) {
    std::fs::copy(fixtures().join(from), dir.join(to)).unwrap();
    let conn = rusqlite::Connection::open(dir.join(to)).unwrap();
    conn.execute_batch(&format!(
        "UPDATE lds SET ld_start_ns = CAST(ld_start_ns * {factor} AS INTEGER), \
         ld_map_ns = CAST(ld_map_ns * {factor} AS INTEGER), \
         ld_reloc_init_ns = CAST(ld_reloc_init_ns * {factor} AS INTEGER);"
    ))
    .unwrap();
}

fn json_rows(out: &Output) -> Vec<serde_json::Value> {
    succeeded(out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["rows"].as_array().unwrap().clone()
}

fn find<'a>(rows: &'a [serde_json::Value], group: &str) -> &'a serde_json::Value {
    rows.iter().find(|r| r["group"] == group).unwrap()
}

/// One recording a side cannot tell drift from change; several, alternating, can.
#[test]
fn several_recordings_a_side_absorb_drift_and_keep_the_change() {
    let (dir, _, _) = copies("replicates");
    // Runs where the machine was slow: dynamic linking 1.4× (`ld` 1.2× in all, `cc` 1.3×).
    drifted(&dir, "before.db", "before-slow.db", 1.4);
    drifted(&dir, "after.db", "after-slow.db", 1.4);
    drifted(&dir, "before.db", "before-2.db", 1.0);
    drifted(&dir, "after.db", "after-slow-2.db", 1.4);
    // The unchanged `ld` looks dearer against a slow run of itself.
    let one = json_rows(&forkprof_diff(
        &dir,
        &["before.db", "before-slow.db", "--format", "json"],
    ));
    let ld = find(&one, "/opt/synth/ld");
    assert_eq!(ld["status"], "changed", "{ld}");
    assert_eq!(ld["interval_method"], "bootstrap", "{ld}");
    // Three runs a side, alternating fast and slow: `ld` is no change, `cc` still changed.
    let out = forkprof_diff(
        &dir,
        &[
            "before.db",
            "before-slow.db",
            "before-2.db",
            "--format",
            "json",
            "--",
            "after-slow.db",
            "after.db",
            "after-slow-2.db",
        ],
    );
    let two = json_rows(&out);
    let ld = find(&two, "/opt/synth/ld");
    assert_eq!(ld["status"], "no significant change", "{ld}");
    assert_eq!(ld["interval_method"], "recordings", "{ld}");
    let cc = find(&two, "/opt/synth/cc");
    assert_eq!(cc["status"], "changed", "{cc}");
    // Counts and totals are per recording; the mean is over all three.
    let single = json_rows(&forkprof_diff(
        &dir,
        &["before.db", "after.db", "--format", "json"],
    ));
    let cc1 = find(&single, "/opt/synth/cc");
    assert_eq!(cc["before"]["processes"], cc1["before"]["processes"]);
    let (t1, t2) = (
        cc1["before"]["total_ns"].as_i64().unwrap(),
        cc["before"]["total_ns"].as_i64().unwrap(),
    );
    assert!(t2 > t1 && t2 < 3 * t1 / 2, "{t1} {t2}");
    // Uneven sides work too, and the table names how many recordings each side has.
    let out = forkprof_diff(&dir, &["before.db", "--", "after.db", "after-slow.db"]);
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("→ 2 recordings"), "{text}");
    assert!(text.contains("1 recording before and 2 after"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sides_must_be_two_or_split_by_double_dash() {
    let (dir, _, _) = copies("sides");
    for args in [&["before.db"][..], &["before.db", "after.db", "after.db"]] {
        let out = forkprof_diff(&dir, args);
        one_line_exit_2(&out, "BEFORE... -- AFTER...");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn one_line_exit_2(out: &Output, names: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(names), "{err}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let (dir, _, _) = copies("bad");
    one_line_exit_2(
        &forkprof_diff(&dir, &["before.db", "missing.db"]),
        "missing.db",
    );
    std::fs::write(dir.join("junk.db"), b"not a database at all").unwrap();
    one_line_exit_2(&forkprof_diff(&dir, &["junk.db", "after.db"]), "junk.db");
    // A newer schema than this forkprof reads.
    let conn = rusqlite::Connection::open(dir.join("after.db")).unwrap();
    conn.execute(
        "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
        [],
    )
    .unwrap();
    drop(conn);
    one_line_exit_2(&forkprof_diff(&dir, &["before.db", "after.db"]), "after.db");
    // Nothing to compare: an empty recording against one with no group in common.
    let conn = rusqlite::Connection::open(dir.join("before.db")).unwrap();
    conn.execute_batch(
        "DELETE FROM spawns; DELETE FROM execs; DELETE FROM lds; DELETE FROM exits;",
    )
    .unwrap();
    drop(conn);
    std::fs::copy(fixtures().join("after.db"), dir.join("after.db")).unwrap();
    one_line_exit_2(
        &forkprof_diff(&dir, &["before.db", "after.db"]),
        "nothing to compare",
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn differential_flame_graph() {
    let (dir, _, _) = copies("svg");
    let out = forkprof_diff(&dir, &["before.db", "after.db", "--flamegraph", "d.svg"]);
    succeeded(&out);
    let svg = std::fs::read_to_string(dir.join("d.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("cc-static"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Asserts that a command exited 0, showing its stderr if not.
fn succeeded(out: &std::process::Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status.code());
}
