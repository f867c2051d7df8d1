//! Input that must be refused is refused: one line naming what is wrong, exit 2, before
//! anything is loaded or written (so none of this needs root), and an existing recording is
//! never overwritten without `--force`.
use std::path::PathBuf;
use std::process::{Command, Output};

fn forkprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .args(args)
        .output()
        .unwrap()
}

fn assert_refused(args: &[&str], says: &str) {
    let out = forkprof(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("forkprof-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn empty_or_inverted_ranges_are_refused() {
    let db = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db");
    let db = db.to_str().unwrap();
    assert_refused(
        &["report", db, "--from", "4s", "--to", "2s"],
        "is not before --to",
    );
    assert_refused(&["report", db, "--top", "0"], "at least 1");
    // One row per process is JSON's or CSV's; the table refuses it.
    assert_refused(
        &["report", db, "--processes", "--format", "table"],
        "--format csv",
    );
    assert_refused(&["top", "--interval", "0s"], "longer than 0");
    assert_refused(
        &["record", "-o", "/tmp/x.db", "--duration", "0s"],
        "longer than 0",
    );
    assert_refused(&["bench", "--rows", "nosuch"], "matches no row");
    // Centuries are a typo, and seconds past any clock's range were a panic.
    assert_refused(
        &["record", "-o", "/tmp/x.db", "--duration", "200years"],
        "at most a year",
    );
    assert_refused(&["top", "--interval", "1e300"], "longer than any clock");
    assert_refused(&["report", db, "--from", "1e300"], "longer than any clock");
}

/// An output no file can be made in is refused when the command line is parsed, before
/// anything is loaded: /proc passes a permission check for root, yet holds no new file (a
/// recording into it used to fail after the programs had loaded, with exit 1). Nothing is
/// left behind where the file can be made.
#[test]
fn an_output_where_no_file_can_be_made_is_refused_at_once() {
    assert_refused(
        &["record", "-o", "/proc/forkprof-test.db", "--duration", "1s"],
        "/proc",
    );
    let db = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db");
    assert_refused(
        &[
            "report",
            db.to_str().unwrap(),
            "--flamegraph",
            "/sys/forkprof-test.svg",
        ],
        "/sys",
    );
    // The file made to find out is gone again: a report refused for its recording (after the
    // command line was parsed) leaves no flame graph.
    let dir = tempdir("probe");
    let svg = dir.join("spawn.svg");
    let missing = dir.join("missing.db");
    assert_refused(
        &[
            "report",
            missing.to_str().unwrap(),
            "--flamegraph",
            svg.to_str().unwrap(),
        ],
        "missing.db",
    );
    assert!(!svg.exists(), "{} left behind", svg.display());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_existing_recording_is_not_overwritten_without_force() {
    let dir = tempdir("force");
    let file = dir.join("old.db");
    std::fs::write(&file, b"an earlier recording").unwrap();
    let path = file.to_str().unwrap();
    assert_refused(&["run", "-o", path, "--", "true"], "--force");
    assert_refused(&["record", "-o", path, "--duration", "1s"], "--force");
    assert_eq!(std::fs::read(&file).unwrap(), b"an earlier recording");
    let _ = std::fs::remove_dir_all(dir);
}

/// No output of a report is written over a recording: not the one it reads (by its path or
/// through a symlink), not another (any SQLite file), not `run`'s own `-o`, and not one
/// output over another. Before, `report s.db --flamegraph s.db` turned the recording into an
/// SVG and exited 0.
#[test]
fn a_report_never_overwrites_a_recording() {
    let dir = tempdir("outputs");
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db");
    let db = dir.join("s.db");
    std::fs::copy(&demo, &db).unwrap();
    let other = dir.join("other.db");
    std::fs::copy(&demo, &other).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&db, &link).unwrap();
    let (db_s, other_s, link_s) = (
        db.to_str().unwrap(),
        other.to_str().unwrap(),
        link.to_str().unwrap(),
    );
    let svg = dir.join("f.svg");
    let svg_s = svg.to_str().unwrap();
    for out in ["--flamegraph", "--folded", "--perfetto"] {
        assert_refused(&["report", db_s, out, db_s], "is the recording");
        assert_refused(&["report", db_s, out, link_s], "is the recording");
        assert_refused(&["report", db_s, out, other_s], "SQLite database");
    }
    assert_refused(
        &["report", db_s, "--flamegraph", svg_s, "--folded", svg_s],
        "given to both",
    );
    assert_refused(
        &["run", "--report", other_s, "--", "true"],
        "SQLite database",
    );
    assert_refused(
        &["run", "-o", svg_s, "--report", svg_s, "--", "true"],
        "given to both",
    );
    assert_refused(
        &["export", db_s, "--parquet", link_s, "--force"],
        "is the recording",
    );
    assert_refused(
        &["diff", db_s, other_s, "--flamegraph", other_s],
        "is the recording",
    );
    for kept in [&db, &other] {
        assert_eq!(std::fs::read(kept).unwrap(), std::fs::read(&demo).unwrap());
    }
    assert!(!svg.exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// A negative duration in a recording (tampered, or written by a build whose concurrent
/// execs mixed their times) is refused as corrupt, exit 2: it used to read as 2^64 ns less a
/// little, and the report showed 18446744073 s of exec.
#[test]
fn a_negative_duration_is_a_corrupt_recording() {
    let dir = tempdir("negative");
    let db = dir.join("t.db");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db"),
        &db,
    )
    .unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE execs SET exec_ns = -5 WHERE rowid = 3", [])
        .unwrap();
    drop(conn);
    for format in ["table", "json"] {
        assert_refused(
            &["report", db.to_str().unwrap(), "--format", format],
            "exec_ns is -5, below 0",
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A recording whose recorder never finished it (killed, or its disk filled) says so: in
/// the table's header and as `"unfinished": true` in JSON. A `--from`/`--to` report gives
/// the run's whole time and the part it covers (it used to give the part as the run's time).
#[test]
fn an_unfinished_recording_and_a_window_are_said() {
    let dir = tempdir("unfinished");
    let db = dir.join("u.db");
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db");
    std::fs::copy(&demo, &db).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("DELETE FROM meta WHERE key = 'ended_ns'", [])
        .unwrap();
    drop(conn);
    let table = forkprof(&["report", db.to_str().unwrap()]);
    assert!(table.status.success());
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("unfinished: the recorder stopped"), "{text}");
    let json = forkprof(&["report", db.to_str().unwrap(), "--format", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["unfinished"], true);
    // The finished original says neither.
    let demo_s = demo.to_str().unwrap();
    let whole = forkprof(&["report", demo_s]);
    assert!(!String::from_utf8_lossy(&whole.stdout).contains("unfinished"));
    let part = forkprof(&["report", demo_s, "--from", "100ms", "--to", "200ms"]);
    let text = String::from_utf8_lossy(&part.stdout);
    assert!(
        text.contains("after 644.3 ms; this report covers 100.0 ms to 200.0 ms of it"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A failed write says where it was going (it used to be only "No space left on device").
#[test]
fn a_failed_write_names_its_file() {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db");
    for format in ["table", "json", "csv", "csv --processes"] {
        let out = Command::new(env!("CARGO_BIN_EXE_forkprof"))
            .args(["report", demo.to_str().unwrap(), "--format"])
            .args(format.split(' '))
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{format}: {err}");
        assert!(
            err.contains("cannot write the report to stdout") && err.contains("No space"),
            "{format}: {err}"
        );
    }
}

/// A closed pipe is a normal end (`forkprof report FILE | head -1`): exit 0, no error line.
/// It used to print an error and exit 1 (JSON) or abort.
#[test]
fn a_closed_pipe_is_a_quiet_end() {
    use std::io::Read as _;
    let dir = tempdir("pipe");
    let db = dir.join("demo.db");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db"),
        &db,
    )
    .unwrap();
    // Far more than a pipe holds (64 KiB), so the writer meets the closed pipe.
    for format in [&["--format", "json", "--processes"][..], &[][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_forkprof"))
            .arg("report")
            .arg(&db)
            .args(format)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The read end is dropped here: the pipe is closed.
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).as_ref()
            ),
            (Some(0), ""),
            "{format:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The flags agree across subcommands, and `run --help` says where the JSON goes.
#[test]
fn help_says_where_the_json_goes_and_top_means_the_same_everywhere() {
    let help = |sub: &str| String::from_utf8_lossy(&forkprof(&[sub, "--help"]).stdout).into_owned();
    assert!(
        help("run").contains("--report /dev/stdout"),
        "{}",
        help("run")
    );
    for sub in ["run", "report", "top", "monitor"] {
        assert!(help(sub).contains("--top"), "{sub}: {}", help(sub));
    }
}

/// Shell completions and a man page, generated from the clap definition.
#[test]
fn completions_and_man_page_come_from_the_command_line_definition() {
    for shell in ["bash", "zsh", "fish"] {
        let out = forkprof(&["completions", shell]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shell}");
        assert!(
            text.contains("precise-ld") && text.contains("flamegraph"),
            "{shell}"
        );
    }
    let man = forkprof(&["man"]);
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(man.status.success());
    assert!(
        text.contains(".TH forkprof 1") && text.contains("record"),
        "{text}"
    );
    assert_eq!(forkprof(&["completions", "nosuch"]).status.code(), Some(2));
}

/// A full disk stops each per-process output with one line naming the file, exit 1, no
/// panic (/dev/full fails every write with ENOSPC).
#[test]
fn a_full_disk_is_an_error_naming_the_file() {
    let db = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo.db");
    let db = db.to_str().unwrap();
    for args in [
        &["report", db, "--perfetto", "/dev/full"][..],
        &["report", db, "--flamegraph", "/dev/full"][..],
        &["report", db, "--folded", "/dev/full"][..],
    ] {
        let out = forkprof(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("cannot write /dev/full") && err.contains("No space left"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
