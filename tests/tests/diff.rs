//! `forkprof diff` on real recordings: dynamic against static, `sh` against a direct exec, a
//! workload against itself (three alternating runs a side, five times: at most one false
//! alarm), and a big parent against a small one.
use std::path::{Path, PathBuf};
use std::process::Command;

use forkprof_tests::{forkprof, needs_root, succeeded, tempdir, workload};
use serde_json::Value;

/// `forkprof run -o DB -- CMD` in `dir`, with `env`.
fn record(dir: &Path, db: &str, cmd: &[&str], env: &[(&str, &str)]) -> PathBuf {
    let path = dir.join(db);
    let out = Command::new(forkprof())
        .current_dir(dir)
        .args(["run", "--report", "/dev/null", "-o"])
        .arg(&path)
        .arg("--")
        .args(cmd)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    succeeded(&out);
    path
}

fn diff(before: &Path, after: &Path, by: &str) -> Value {
    diff_with(before, after, &["--by", by])
}

fn diff_with(before: &Path, after: &Path, flags: &[&str]) -> Value {
    let out = Command::new(forkprof())
        .arg("diff")
        .args([before, after])
        .args(flags)
        .args(["--format", "json"])
        .output()
        .unwrap();
    succeeded(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rows(v: &Value) -> &Vec<Value> {
    v["rows"].as_array().unwrap()
}

fn row<'a>(v: &'a Value, group: &str) -> &'a Value {
    rows(v)
        .iter()
        .find(|r| r["group"] == group)
        .unwrap_or_else(|| panic!("no row {group}: {v:#}"))
}

fn phase<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
}

fn mean(side: &Value) -> i64 {
    side["mean_ns"].as_i64().unwrap_or(0)
}

/// `main(){}` built dynamic (`dyn`) and static (`stat`) in a fresh directory.
fn programs() -> PathBuf {
    let dir = tempdir();
    std::fs::write(dir.join("main.c"), "int main(void) { return 0; }\n").unwrap();
    forkprof_tests::gcc(&dir, &["-O2", "-o", "dyn", "main.c"]);
    forkprof_tests::gcc(&dir, &["-O2", "-static", "-o", "stat", "main.c"]);
    dir
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

#[test]
fn dynamic_to_static_drops_the_dynamic_linker() {
    needs_root!();
    let dir = programs();
    let w = workload();
    let w = w.to_str().unwrap();
    let (dynamic, stat) = (path(&dir, "dyn"), path(&dir, "stat"));
    let a = record(&dir, "a.db", &[w, "spawn", "fork", "200", &dynamic], &[]);
    let b = record(&dir, "b.db", &[w, "spawn", "fork", "200", &stat], &[]);
    let v = diff(&a, &b, "binary");
    assert_eq!(row(&v, &dynamic)["status"], "gone", "{v:#}");
    assert_eq!(row(&v, &stat)["status"], "new", "{v:#}");
    for ld in ["ld_start", "ld_map", "ld_reloc_init"] {
        let p = phase(&v, ld);
        // Only fp-workload itself is dynamic after: 1 process in 201, the static children
        // count 0. It links more than `main(){}` does (its ld_map was 7× a child's here), so
        // the mean falls by far less than 201×. Halved at least: for the mean not to halve,
        // that one process's phase would have to outweigh the 200 children's together (a
        // stall of milliseconds), or the static children would have to show ld time.
        assert!(mean(&p["before"]) > 0, "{ld}: {p}");
        assert!(2 * mean(&p["after"]) < mean(&p["before"]), "{ld}: {p}");
        assert_eq!(p["status"], "changed", "{ld}: {p}");
    }
    // The phase that fell by the largest share is one of ld.so's: after, only fp-workload
    // itself links, 1 process in 201, so their means fall by 90% or more. By share, not by
    // nanoseconds: one stall of 50 ms among the 200 forks before (seen once) made `fork`'s
    // mean fall by more nanoseconds than ld.so's, and no phase that stays falls by 90%
    // without a stall 25 times its own time. Phases under 1 µs before are left out, and
    // with them `cow_faults`, whose mean is a count of faults (6 here), not a time.
    let fell_most = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["phase"] != "spawn_cost" && mean(&p["before"]) >= 1000)
        .min_by(|x, y| {
            let share = |p: &Value| mean(&p["after"]) as f64 / mean(&p["before"]) as f64;
            share(x).total_cmp(&share(y))
        })
        .unwrap();
    assert!(
        fell_most["phase"].as_str().unwrap().starts_with("ld_"),
        "{fell_most}\n{v:#}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_direct_exec_has_no_sh_rows() {
    needs_root!();
    let dir = programs();
    let w = workload();
    let dynamic = path(&dir, "dyn");
    let script = format!("i=0; while [ $i -lt 100 ]; do {dynamic}; i=$((i+1)); done");
    let a = record(&dir, "sh.db", &["/bin/sh", "-c", &script], &[]);
    let b = record(
        &dir,
        "direct.db",
        &[w.to_str().unwrap(), "spawn", "fork", "100", &dynamic],
        &[],
    );
    for by in ["binary", "parent"] {
        let v = diff(&a, &b, by);
        let sh: Vec<&Value> = rows(&v)
            .iter()
            .filter(|r| r["group"].as_str().unwrap().ends_with("/sh"))
            .collect();
        assert!(!sh.is_empty(), "by {by}: no sh row: {v:#}");
        for r in sh {
            assert_eq!(r["status"], "gone", "by {by}: {r}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_same_workload_twice_is_no_significant_change() {
    needs_root!();
    let dir = programs();
    let w = workload();
    let cmd = [
        w.to_str().unwrap(),
        "spawn",
        "fork",
        "100",
        &path(&dir, "dyn"),
    ];
    // A VM's speed drifts between runs (back-to-back recordings of this workload differed by
    // up to 36% in mean spawn cost on one CI host), so one recording a side cannot tell drift
    // from change, and says so. Three runs a side, alternating, put the drift into the
    // interval. The check is the rate: at most one false alarm in five comparisons (the
    // intervals are 99% ones, over several rows and phases).
    let mut alarms = Vec::new();
    for round in 0..5 {
        let mut sides: [Vec<PathBuf>; 2] = Default::default();
        for run in 0..3 {
            for (side, name) in sides.iter_mut().zip(["a", "b"]) {
                side.push(record(&dir, &format!("{name}{round}-{run}.db"), &cmd, &[]));
            }
        }
        let mut args: Vec<&str> = sides[0].iter().map(|p| p.to_str().unwrap()).collect();
        args.extend(["--format", "json", "--"]);
        args.extend(sides[1].iter().map(|p| p.to_str().unwrap()));
        let out = Command::new(forkprof())
            .arg("diff")
            .args(&args)
            .output()
            .unwrap();
        succeeded(&out);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        for r in rows(&v) {
            if r["status"] == "too few processes" {
                continue;
            }
            assert_eq!(r["interval_method"], "recordings", "{r}");
            if r["status"] != "no significant change" {
                alarms.push(format!("round {round}: {r}"));
            }
        }
        if round == 0 {
            // One recording a side: the table says what its interval leaves out.
            let v = diff(&sides[0][0], &sides[1][0], "binary");
            let notes = v["notes"].to_string();
            assert!(notes.contains("not the machine's drift"), "{notes}");
        }
    }
    assert!(alarms.len() <= 1, "false alarms: {alarms:#?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_big_parent_forks_slower_by_its_page_tables() {
    needs_root!();
    let dir = tempdir();
    let w = workload();
    let cmd = [w.to_str().unwrap(), "spawn", "fork", "20"];
    let small = record(&dir, "small.db", &cmd, &[("FP_RSS_MIB", "64")]);
    let big = record(&dir, "big.db", &cmd, &[("FP_RSS_MIB", "1024")]);
    let v = diff(&small, &big, "method");
    let fork = row(&v, "fork");
    assert_eq!(fork["status"], "changed", "{fork}");
    let ratio = phase(&v, "fork")["ratio"].as_f64().unwrap();
    assert!(ratio > 4.0, "fork ratio {ratio}: {v:#}");
    // The fork's growth is its page-table copy. The child's exit teardown of the same 1 GiB
    // mapping grows about as much, and on this host (6.18, a VM) often more: either may be
    // the part that moved most, and the fork is always refined to pagetable_copy.
    let change = |p: &str| mean(&phase(&v, p)["after"]) - mean(&phase(&v, p)["before"]);
    assert!(2 * change("pagetable_copy") >= change("fork"), "{v:#}");
    let moved = fork["moved_phase"].as_str().unwrap();
    assert!(
        moved == "pagetable_copy" || moved == "exit_teardown",
        "{fork}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
