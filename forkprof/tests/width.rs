//! On a terminal, `forkprof report`'s tables fit its width: no line is wider than the
//! terminal and no phase name or binary name is broken inside a cell (issue 13, item 9).
//! Piped, the report keeps every column and full paths (tests/golden.rs checks the bytes).
//! The terminal is a pseudo-terminal from util-linux `script`. Needs no root.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use forkprof::model::phases::PHASES;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A private copy of the recording: reading it may leave SQLite files beside it.
fn recording(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("forkprof-width-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("demo.db");
    std::fs::copy(fixtures().join("demo.db"), &db).unwrap();
    (dir, db)
}

fn have_script() -> bool {
    Command::new("script")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `forkprof report DB ARGS` on a pseudo-terminal `cols` wide. `columns` sets COLUMNS
/// (else it is unset and the program has to ask the terminal).
fn on_terminal(db: &Path, cols: usize, columns: bool, args: &str) -> String {
    let env = if columns {
        format!("COLUMNS={cols}")
    } else {
        "-u COLUMNS".to_string()
    };
    let cmd = format!(
        "stty cols {cols} rows 50; env {env} '{}' report '{}' {args}",
        env!("CARGO_BIN_EXE_forkprof"),
        db.display()
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap().replace('\r', "");
    assert!(out.status.success(), "{cmd}: {text}");
    text
}

/// The binaries' last path components, from the JSON report.
fn basenames(db: &Path) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .arg("report")
        .arg(db)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["groups"]["binary"].as_array().unwrap();
    let mut names: Vec<String> = rows
        .iter()
        .map(|r| {
            let path = r["binary"].as_str().unwrap();
            path.rsplit('/').next().unwrap().to_string()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Each cell of a line (the whole line outside the tables): its first and last token.
fn edges(line: &str) -> Vec<(String, String)> {
    line.split(['│', '┆', '║'])
        .map(|cell| {
            let tokens: Vec<&str> = cell
                .split(|c: char| c.is_whitespace() || "/,;:()`+*=".contains(c))
                .filter(|t| !t.is_empty())
                .collect();
            let first = tokens.first().map_or("", |t| t).to_string();
            let last = tokens.last().map_or("", |t| t).to_string();
            (first, last)
        })
        .collect()
}

/// Panics where a line is wider than `cols`, where a known name is broken between two
/// lines of a cell (`exec_faile` + `d`, `/usr/bin/l` + `s`) or of the prose, or where a
/// name is not shown whole anywhere.
fn check(text: &str, cols: usize, names: &[String]) {
    let lines: Vec<&str> = text.lines().collect();
    for line in &lines {
        let n = line.chars().count();
        assert!(n <= cols, "a line of {n} > {cols} columns:\n{line}\n{text}");
    }
    for pair in lines.windows(2) {
        let (above, below) = (edges(pair[0]), edges(pair[1]));
        if above.len() != below.len() {
            continue;
        }
        for ((_, head), (tail, _)) in above.iter().zip(&below) {
            if head.is_empty() || tail.is_empty() {
                continue;
            }
            let joined = format!("{head}{tail}");
            if let Some(name) = names.iter().find(|n| n.contains(&joined)) {
                panic!(
                    "`{name}` is broken (`{head}` + `{tail}`) at {cols} columns:\n{}\n{}\n{text}",
                    pair[0], pair[1]
                );
            }
        }
    }
    for name in names {
        assert!(
            text.contains(name.as_str()),
            "`{name}` is not shown whole at {cols} columns:\n{text}"
        );
    }
}

#[test]
fn the_report_fits_the_terminal() {
    if !have_script() {
        eprintln!("skipped: no util-linux `script` for a pseudo-terminal");
        return;
    }
    let (dir, db) = recording("report");
    let mut names: Vec<String> = PHASES.iter().map(|p| p.name().to_string()).collect();
    names.extend(basenames(&db));
    for cols in [200, 100, 80] {
        let text = on_terminal(&db, cols, true, "");
        check(&text, cols, &names);
        let by_parent = on_terminal(&db, cols, true, "--by parent");
        check(&by_parent, cols, &names[..PHASES.len()]);
    }
    // No COLUMNS: the terminal's own size.
    let text = on_terminal(&db, 90, false, "");
    check(&text, 90, &names);
    let _ = std::fs::remove_dir_all(dir);
}

/// COLUMNS alone does not make a pipe a terminal: the piped table is the golden one.
#[test]
fn piped_output_ignores_columns() {
    let (dir, db) = recording("piped");
    let out = Command::new(env!("CARGO_BIN_EXE_forkprof"))
        .arg("report")
        .arg(&db)
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    assert!(out.status.success());
    let golden = std::fs::read(fixtures().join("golden/table.txt")).unwrap();
    assert!(
        out.stdout == golden,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(dir);
}
