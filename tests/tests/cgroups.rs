//! Cgroup attribution on real cgroup v2 groups made by the test: `report --by cgroup` and
//! `--by unit` count each group's processes exactly, a process that moves between its fork
//! and its exec counts where it exec'd, and a recording keeps the paths of groups removed
//! since. `record --cgroup` records one group's processes only (filtered in the kernel),
//! refuses a path that is no cgroup, and stops cleanly when its group is removed. While
//! its group is empty it leaves the hooks that fire on every syscall, page fault and
//! mmap-lock event off, and attaches them once the group has a process.
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;

use forkprof_tests::{
    Groups, HOT_TRACEPOINTS, READY, attached_tracepoints, attached_trampolines, forkprof, in_group,
    needs_root, recorded_sources, sh, succeeded, syscalls_attached, tempdir, workload,
};
use serde_json::Value;

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
    let mut groups = Groups::new("counts");
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
        // A builtin last, so that every command above is forked: a shell may exec the last
        // command of `sh -c` in its own process (busybox's does, dash does not).
        "true".to_string(),
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

/// Starts `forkprof record --cgroup GROUP -o DB`, and waits (up to `READY`) until it says that
/// tracing has started. Returns it with the rest of its stderr, line by line.
fn record_cgroup(group: &str, db: &Path) -> (Child, Receiver<String>) {
    let mut rec = Command::new(forkprof())
        .args(["record", "--cgroup", group, "--duration", "120s", "-o"])
        .arg(db)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = forkprof_tests::stderr_lines(&mut rec);
    let mut said = Vec::new();
    loop {
        match rx.recv_timeout(READY) {
            Ok(line) if line.starts_with("forkprof: recording") => {
                assert!(line.contains(group), "{line}");
                return (rec, rx);
            }
            Ok(line) => said.push(line),
            Err(_) => panic!("forkprof record did not start tracing: {}", said.join("\n")),
        }
    }
}

/// Waits (up to `READY`) until `record --cgroup` says, on `stderr`, that its group's hot hooks
/// are attached.
fn wait_armed(stderr: &Receiver<String>) {
    let mut said = Vec::new();
    loop {
        match stderr.recv_timeout(READY) {
            Ok(line) if line.contains("hooks are attached now") => return,
            Ok(line) => said.push(line),
            Err(_) => panic!("the hooks were not attached: {said:?}"),
        }
    }
}

#[test]
fn record_cgroup_records_only_the_processes_of_its_group() {
    needs_root!();
    let mut groups = Groups::new("scope");
    let a = groups.make("a.service");
    let b = groups.make("b.service");
    let w = workload();
    let w = w.to_str().unwrap();
    let dir = tempdir();
    let db = dir.join("scoped.db");
    let (mut rec, stderr) = record_cgroup(&groups.shown("a.service"), &db);
    // The three workloads run side by side: 40 spawns in a.service, 60 in b.service, 50
    // outside both (in the test's own cgroup). a.service's shell moves in, which has
    // forkprof attach its hot hooks, and waits for them before it execs its workload: they
    // take 7-20 ms to attach here, and far longer where they are 28 fentry/fexit links.
    let mut shell = Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo $$ > {}/cgroup.procs && read go && exec {w} spawn fork 40 /bin/true",
                a.display()
            ),
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    wait_armed(&stderr);
    use std::io::Write as _;
    writeln!(shell.stdin.take().unwrap(), "go").unwrap();
    sh(&format!(
        "{} & {w} spawn fork 50 /bin/true & wait",
        in_group(&b, &format!("{w} spawn fork 60 /bin/true")),
    ));
    assert!(shell.wait().unwrap().success());
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(rec.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    // The workload (it moved itself into a.service, then exec'd there) and its 40 children:
    // nothing of b.service, nor of the 50 outside, nor the shells that started them.
    let rows = report(&db, "cgroup");
    assert_eq!(rows, vec![(groups.shown("a.service"), 1 + 40)]);
    // Every exec seen: each process is named by the binary it exec'd, never by a shell's
    // name, or `?`. The report ranks its rows by cost, which puts the workload's one process
    // first or last depending on the kernel and the host (Debian 6.1 under TCG ranked it
    // first), so the rows are compared by name.
    let mut binaries = report(&db, "binary");
    binaries.sort();
    let mut expected = vec![("/bin/true".to_string(), 40), (w.to_string(), 1)];
    expected.sort();
    assert_eq!(binaries, expected, "{binaries:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The root cgroup has no `cgroup.events` and always has processes: `--cgroup /` attaches
/// everything at start and records the whole system.
#[test]
fn record_cgroup_of_the_root_records_everything() {
    needs_root!();
    let w = workload();
    let w = w.to_str().unwrap();
    let dir = tempdir();
    let db = dir.join("root.db");
    let (mut rec, _stderr) = record_cgroup("/", &db);
    let hooks = attached_tracepoints(rec.id());
    let trampolines = attached_trampolines(rec.id());
    sh(&format!("{w} spawn fork 5 /bin/true"));
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(rec.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    // The syscalls job was attached from the start, by whichever source this kernel allows.
    syscalls_attached(&recorded_sources(&db), &hooks, trampolines, 0).unwrap();
    let binaries = report(&db, "binary");
    assert!(
        count(&binaries, "/bin/true").unwrap_or(0) >= 5,
        "{binaries:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn record_cgroup_of_an_empty_group_attaches_its_hot_hooks_once_it_has_a_process() {
    needs_root!();
    let mut groups = Groups::new("arming");
    let a = groups.make("a.service");
    let w = workload();
    let w = w.to_str().unwrap();
    let dir = tempdir();
    let db = dir.join("armed.db");
    let (mut rec, stderr) = record_cgroup(&groups.shown("a.service"), &db);
    let pid = rec.id();
    let idle = attached_tracepoints(pid);
    // No fentry or fexit either, but the one non-hot job's (begin_new_exec, before 6.10).
    let idle_trampolines = attached_trampolines(pid);
    assert!(
        idle_trampolines <= 1,
        "{idle_trampolines} fentry/fexit links while idle"
    );
    for cheap in ["task_newtask", "sched_process_exit", "sched_process_free"] {
        assert!(idle.contains(&cheap.to_string()), "{cheap}: {idle:?}");
    }
    for hot in HOT_TRACEPOINTS {
        assert!(
            !idle.contains(&hot.to_string()),
            "{hot} attached while idle: {idle:?}"
        );
    }
    // A shell moves into the group and waits for a line before it execs the workload, so
    // that its exec and the 20 spawns come after forkprof has said the hooks are on.
    let mut shell = Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo $$ > {}/cgroup.procs && read go && exec {w} spawn fork 20 /bin/true",
                a.display()
            ),
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    wait_armed(&stderr);
    let armed = attached_tracepoints(pid);
    let armed_trampolines = attached_trampolines(pid);
    use std::io::Write as _;
    writeln!(shell.stdin.take().unwrap(), "go").unwrap();
    assert!(shell.wait().unwrap().success());
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGINT) }, 0);
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    // Armed: the hot hooks of the sources this kernel allows, which the recording names. The
    // mmap-lock pair is only there where no better source of pagetable_copy is.
    let sources = recorded_sources(&db);
    syscalls_attached(&sources, &armed, armed_trampolines, idle_trampolines).unwrap();
    let cow = sources["cow_faults"].as_str().unwrap_or("");
    assert_eq!(
        armed.iter().any(|t| t == "page_fault_user"),
        cow.contains("page_fault_user"),
        "cow_faults from {cow:?}; tracepoints {armed:?}"
    );
    let out = Command::new(forkprof())
        .args(["report", "--format", "json", "--by", "cgroup"])
        .arg(&db)
        .output()
        .unwrap();
    succeeded(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["groups"]["cgroup"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    let group = &rows[0];
    assert_eq!(group["binary"], groups.shown("a.service").as_str(), "{v}");
    assert_eq!(group["processes"], 21, "{group}");
    // Every exec (the shell's and the 20 children's) and every fork is measured whole.
    assert_eq!(group["execs"], 21, "{group}");
    assert_eq!(group["phases"]["exec"]["count"], 21, "{group}");
    assert_eq!(group["phases"]["fork"]["count"], 20, "{group}");
    assert_eq!(group["phases"]["ld_map"]["count"], 21, "{group}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn record_cgroup_stops_cleanly_when_its_group_is_removed() {
    needs_root!();
    let mut groups = Groups::new("removed");
    let c = groups.make("c.service");
    let w = workload();
    let w = w.to_str().unwrap();
    let dir = tempdir();
    let db = dir.join("removed.db");
    let (mut rec, stderr) = record_cgroup(&groups.shown("c.service"), &db);
    sh(&in_group(&c, &format!("{w} spawn fork 10 /bin/true")));
    // Empty now: it can be removed while forkprof records it.
    std::fs::remove_dir(&c).unwrap();
    // forkprof stops by itself (its --duration is 120 s), says why, and keeps the records.
    let status = rec.wait().unwrap();
    // Every line up to the end of its stderr: the reader thread may not have passed the last
    // ones on yet when the exit is reaped.
    let said: Vec<String> = stderr.iter().collect();
    assert_eq!(status.code(), Some(0), "{said:?}");
    assert!(
        said.iter()
            .any(|l| l.contains("c.service was removed") && l.contains("stops here")),
        "{said:?}"
    );
    let rows = report(&db, "cgroup");
    assert_eq!(rows, vec![(groups.shown("c.service"), 1 + 10)]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_cgroup_that_does_not_exist_is_refused_before_anything_is_loaded() {
    // No root needed: the path is checked first.
    let dir = tempdir();
    let db = dir.join("never.db");
    let missing = "/forkprof-no-such-group/x.service";
    let runs: [&[&str]; 3] = [
        &["record", "--cgroup", missing, "-o", db.to_str().unwrap()],
        &["top", "--once", "--cgroup", missing],
        &["monitor", "--listen", "127.0.0.1:0", "--cgroup", missing],
    ];
    for args in runs {
        let out = Command::new(forkprof()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("--cgroup {missing}: no such cgroup")),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    assert!(!db.exists());
    // `..` could leave the hierarchy: refused as well.
    let out = Command::new(forkprof())
        .args(["record", "--cgroup", "/../../etc", "-o"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without \"..\""));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn record_cgroup_follows_a_process_that_leaves_to_where_it_execs_and_no_further() {
    needs_root!();
    let mut groups = Groups::new("leaves");
    let a = groups.make("a.service");
    let elsewhere = groups.make("elsewhere");
    let w = workload();
    let dir = tempdir();
    let db = dir.join("left.db");
    // outer.sh runs in a.service and forks a sh (born there: followed), which moves to
    // `elsewhere` and execs the workload; the workload's 5 children are forked outside.
    let inner = dir.join("inner.sh");
    std::fs::write(
        &inner,
        format!(
            "echo $$ > {}/cgroup.procs\nexec {} spawn fork 5 /bin/true\n",
            elsewhere.display(),
            w.display()
        ),
    )
    .unwrap();
    let outer = dir.join("outer.sh");
    std::fs::write(&outer, format!("sh {}\ntrue\n", inner.display())).unwrap();
    // A process is in a.service already (as a service's idle main process would be), so
    // the scope's hooks are on from the start and outer.sh's fork of the shell is seen.
    let resident = forkprof_tests::resident_in(&a);
    let (mut rec, _stderr) = record_cgroup(&groups.shown("a.service"), &db);
    sh(&in_group(&a, &format!("sh {}", outer.display())));
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(rec.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    drop(resident);
    let mut rows = report(&db, "cgroup");
    rows.sort();
    // a.service: outer.sh's shell. The one that left: followed to its exit, shown where it
    // exec'd (outside the scope, never counted in it); its children: not traced.
    assert_eq!(
        rows,
        vec![
            (groups.shown("a.service"), 1),
            (groups.shown("elsewhere"), 1)
        ]
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Two processes that come into the scope from outside, one after the other under the same
/// pid, are two processes: each is first seen mid-life (its creation was not traced), keyed
/// by its own start time, and labelled from /proc at its own first sight. Before, both had
/// the key (pid, 0): one process with both execs, and the first one's label.
#[test]
fn two_late_arrivals_with_one_pid_are_two_processes() {
    needs_root!();
    let mut groups = Groups::new("reuse");
    let a = groups.make("a.service");
    let dir = tempdir();
    let db = dir.join("reuse.db");
    let resident = forkprof_tests::resident_in(&a);
    let (mut rec, _stderr) = record_cgroup(&groups.shown("a.service"), &db);
    // Each child is forked outside the scope, moved in, and execs /bin/sleep there.
    let out = Command::new(workload())
        .arg("move-in-reuse")
        .arg(&a)
        .output()
        .unwrap();
    succeeded(&out);
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pid = said["pid"].as_u64().unwrap();
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(rec.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    drop(resident);
    // Two processes under the pid, each first seen mid-life (its start shown negated), with
    // starts of their own, one exec each, and each labelled from /proc at its own first
    // sight: created by the workload (the parent its label names). The test runs in the
    // kernel matrix's guests too (`cargo xtask vm-test`), which have no sqlite3: the report
    // says it all.
    let out = Command::new(forkprof())
        .args(["report", "--format", "json", "--processes"])
        .arg(&db)
        .output()
        .unwrap();
    succeeded(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mine: Vec<&Value> = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pid"] == pid)
        .collect();
    let shown: Vec<(i64, usize, &str)> = mine
        .iter()
        .map(|p| {
            (
                p["start_ns"].as_i64().unwrap(),
                p["execs"].as_array().unwrap().len(),
                p["parent_binary"].as_str().unwrap(),
            )
        })
        .collect();
    let parent = std::fs::canonicalize(workload()).unwrap();
    let parent = parent.to_str().unwrap();
    assert_eq!(shown.len(), 2, "{mine:?}");
    assert_ne!(shown[0].0, shown[1].0, "{mine:?}");
    for &(start, execs, parent_binary) in &shown {
        assert!(start < 0, "{mine:?}");
        assert_eq!((execs, parent_binary), (1, parent), "{mine:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
