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
    assert_refused(&["top", "--interval", "0s"], "longer than 0");
    assert_refused(
        &["record", "-o", "/tmp/x.db", "--duration", "0s"],
        "longer than 0",
    );
    assert_refused(&["bench", "--rows", "nosuch"], "matches no row");
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
