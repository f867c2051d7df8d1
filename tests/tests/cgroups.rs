//! Cgroup attribution on real cgroup v2 groups made by the test: `report --by cgroup` and
//! `--by unit` count each group's processes exactly, a process that moves between its fork
//! and its exec counts where it exec'd, and a recording keeps the paths of groups removed
//! since.
use std::path::{Path, PathBuf};
use std::process::Command;

use forkprof_tests::{forkprof, needs_root, succeeded, tempdir, workload};
use serde_json::Value;

/// The cgroup2 mount (`/sys/fs/cgroup/unified` on this hybrid VM, `/sys/fs/cgroup` on a
/// pure v2 machine).
fn cgroup2() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|r| r.starts_with("cgroup2 "))
        })
        .and_then(|l| l.split_whitespace().nth(4))
        .map(PathBuf::from)
        .expect("this machine has a cgroup2 mount")
}

/// Groups made by the test, removed (once empty) when dropped.
struct Groups {
    top: PathBuf,
    made: Vec<PathBuf>,
}

impl Groups {
    fn new() -> Self {
        let top = cgroup2().join(format!("forkprof-test-{}", std::process::id()));
        std::fs::create_dir_all(&top).unwrap();
        Self {
            top: top.clone(),
            made: vec![top],
        }
    }

    fn make(&mut self, name: &str) -> PathBuf {
        let dir = self.top.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        self.made.push(dir.clone());
        dir
    }

    /// `name`'s path as forkprof shows it (below the cgroup2 mount).
    fn shown(&self, name: &str) -> String {
        let rel = self.top.strip_prefix(cgroup2()).unwrap();
        format!("/{}/{name}", rel.display())
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        for dir in self.made.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// `sh -c` moving itself into `group`, then exec'ing `cmd`.
fn in_group(group: &Path, cmd: &str) -> String {
    format!(
        "sh -c 'echo $$ > {}/cgroup.procs && exec {cmd}'",
        group.display()
    )
}

fn report(db: &Path, by: &str) -> Vec<(String, u64)> {
    let out = Command::new(forkprof())
        .args(["report", "--format", "json", "--by", by])
        .arg(db)
        .output()
        .unwrap();
    succeeded(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["groups"][by]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["binary"].as_str().unwrap().to_string(),
                r["processes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn count(rows: &[(String, u64)], group: &str) -> Option<u64> {
    rows.iter().find(|(g, _)| g == group).map(|(_, n)| *n)
}

#[test]
fn each_cgroup_counts_its_own_spawns_and_a_move_counts_where_it_execd() {
    needs_root!();
    let mut groups = Groups::new();
    let a = groups.make("a.service");
    let b = groups.make("b.service");
    let moved = groups.make("moved");
    let w = workload();
    let w = w.to_str().unwrap();
    let dir = tempdir();
    let db = dir.join("cg.db");
    // 40 spawns in a.service, 60 in b.service, 20 outside both (in the test's own cgroup);
    // then a process created in a.service that moves to `moved` before it execs.
    let script = [
        in_group(&a, &format!("{w} spawn fork 40 /bin/true")),
        in_group(&b, &format!("{w} spawn fork 60 /bin/true")),
        format!("{w} spawn fork 20 /bin/true"),
        // A sh in a.service forks a sh (created there), which moves to `moved` and execs.
        format!(
            "sh -c 'echo $$ > {}/cgroup.procs && sh -c \"echo \\$\\$ > {}/cgroup.procs && exec {w} spawn fork 5 /bin/true\" && true'",
            a.display(),
            moved.display()
        ),
    ]
    .join("; ");
    let out = Command::new(forkprof())
        .args(["run", "--report", "/dev/null", "-o"])
        .arg(&db)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    succeeded(&out);
    let rows = report(&db, "cgroup");
    // Each workload is one process in its group plus its children. (The sh that moved
    // itself into a.service to fork the one that moved had exec'd before it moved: it
    // counts where it exec'd, outside.)
    assert_eq!(
        count(&rows, &groups.shown("a.service")),
        Some(1 + 40),
        "{rows:?}"
    );
    assert_eq!(
        count(&rows, &groups.shown("b.service")),
        Some(1 + 60),
        "{rows:?}"
    );
    // Created in a.service, moved, exec'd: it counts in `moved` (not where it was
    // created), with its 5 children.
    assert_eq!(
        count(&rows, &groups.shown("moved")),
        Some(1 + 5),
        "{rows:?}"
    );
    let outside: u64 = rows
        .iter()
        .filter(|(g, _)| !g.starts_with(&groups.shown("")))
        .map(|(_, n)| n)
        .sum();
    // The root sh, the workload of 20 and its children, and the sh that moved after its exec.
    assert_eq!(outside, 1 + 1 + 20 + 1, "{rows:?}");
    let units = report(&db, "unit");
    assert_eq!(count(&units, "a.service"), Some(41), "{units:?}");
    assert_eq!(count(&units, "b.service"), Some(61), "{units:?}");
    // The groups are gone; the recording keeps their paths.
    drop(groups);
    let again = report(&db, "cgroup");
    assert_eq!(rows, again);
    let _ = std::fs::remove_dir_all(dir);
}
