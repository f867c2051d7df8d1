//! `forkprof run` end to end: real eBPF programs, real processes, exact counts.
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use forkprof_tests::{
    SYSCALL_EVENTS_SOURCE, forkprof, needs_root, run_traced, run_traced_with, tempdir, workload,
};

const N: u64 = 25;

fn spawn_run(method: &str, program: Option<&str>) -> forkprof_tests::Run {
    let w = workload();
    let count = N.to_string();
    let mut cmd = vec![w.to_str().unwrap(), "spawn", method, &count];
    cmd.extend(program);
    let run = run_traced(&cmd, |_| {});
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    assert_eq!(run.summary("lost_events"), 0);
    run
}

/// The agent's wakeups while the traced command sleeps 3 s: the voluntary context switches
/// of its main thread, which the command reads from `/proc/$PPID/status` (forkprof is its
/// parent) half a second in and 3 s later.
fn agent_wakeups_in_3s(flags: &[&str]) -> u64 {
    let script = "s() { sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' /proc/$PPID/status; }; \
                  sleep 0.5; a=$(s); sleep 3; b=$(s); echo $((b - a))";
    let run = forkprof_tests::run_traced_with(flags, &["sh", "-c", script], |_| {});
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    run.stdout().trim().parse().expect("a count of wakeups")
}

/// A plain `run`, whose records nothing reads before the command ends, polls the ring
/// buffer every second; with a recording it polls every 100 ms. A poll measured two
/// voluntary switches here, so about 6 in 3 s against 60; the bound sits halfway, in ratio,
/// between the two paces (a factor of 3 from each).
#[test]
fn a_plain_run_wakes_its_agent_ten_times_less_often() {
    needs_root!();
    let lazy = agent_wakeups_in_3s(&[]);
    let dir = tempdir();
    let db = dir.join("pace.db");
    let prompt = agent_wakeups_in_3s(&["-o", db.to_str().unwrap()]);
    eprintln!("agent wakeups in 3 s: plain run {lazy}, recording {prompt}");
    assert!(lazy < 20, "a plain run's agent woke {lazy} times in 3 s");
    assert!(
        prompt >= 20,
        "a recording run's agent woke {prompt} times in 3 s"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn counts_each_method_exactly() {
    needs_root!();
    for (method, program) in [
        ("fork", None),
        ("fork", Some("/bin/true")),
        ("vfork", None),
        ("vfork", Some("/bin/true")),
        ("posix_spawn", Some("/bin/true")),
    ] {
        let run = spawn_run(method, program);
        assert_eq!(
            run.method(method),
            N,
            "{method} {program:?}: {}",
            run.report["methods"]
        );
        assert_eq!(run.summary("processes"), N + 1, "{method}: root + children");
        assert_eq!(run.summary("threads"), 0, "{method}");
        let execs = if program.is_some() { N + 1 } else { 1 };
        assert_eq!(run.summary("execs"), execs, "{method} {program:?}");
        assert_eq!(run.summary("still_running"), 0);
        let total: u64 = run.report["methods"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(total, N, "no other method seen for {method}");
    }
}

/// With `FORKPROF_TEST_PROC_SLOTS=2` the kernel's direct-mapped process array has two
/// slots, so almost every process shares its slot with a live one and is kept in the spill
/// map instead: the counts, exec attempts and exits must come out exactly as with a slot
/// each. (On a machine whose `pid_max` is the array's size, 32768 here, the spill path is
/// otherwise never taken.)
#[test]
fn processes_that_share_a_slot_are_followed_exactly() {
    needs_root!();
    let w = workload();
    let count = N.to_string();
    for (method, program) in [("fork", "/bin/true"), ("vfork", "/bin/true")] {
        let cmd = [w.to_str().unwrap(), "spawn", method, &count, program];
        let run = run_traced(&cmd, |c| {
            c.env("FORKPROF_TEST_PROC_SLOTS", "2");
        });
        assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
        assert!(
            run.stderr().contains("FORKPROF_TEST_PROC_SLOTS=2"),
            "the switch must say it is on: {}",
            run.stderr()
        );
        assert_eq!(run.summary("lost_events"), 0, "{method}");
        assert_eq!(run.method(method), N, "{method}: {}", run.report["methods"]);
        assert_eq!(run.summary("processes"), N + 1, "{method}: root + children");
        assert_eq!(run.summary("execs"), N + 1, "{method}");
        assert_eq!(run.summary("still_running"), 0, "{method}");
        let attempts = run.exec_attempts();
        let children = attempts
            .iter()
            .filter(|(path, errno)| path == program && *errno == 0)
            .count() as u64;
        assert_eq!(
            children, N,
            "{method}: every child's exec, joined with its path"
        );
        // Every process's exit was seen with its parent's notification, and every child's
        // dynamic linker was followed to its end.
        assert_eq!(run.summary("exits_without_notify"), 0, "{method}");
        let with_phase = |phase: &str| {
            run.report["processes"]
                .as_array()
                .expect("processes")
                .iter()
                .filter(|p| p["phases"][phase].as_u64().is_some_and(|ns| ns > 0))
                .count() as u64
        };
        assert_eq!(with_phase("exit_teardown"), N + 1, "{method}");
        assert!(with_phase("ld_reloc_init") >= N, "{method}");
    }
    let bad = Command::new(forkprof())
        .args(["run", "--", "/bin/true"])
        .env("FORKPROF_TEST_PROC_SLOTS", "3")
        .output()
        .expect("start forkprof");
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("power of two"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// A child made by clone(2) with another exit signal than SIGCHLD notifies its parent by
/// that signal: its exit's teardown ends there, as a fork child's does at SIGCHLD (before,
/// only SIGCHLD was taken, and every such exit counted as without notification). With no
/// exit signal at all the parent is only woken, so nothing marks the notification: those
/// exits have no teardown time and count as without notification.
#[test]
fn a_clone_childs_own_exit_signal_notifies_its_parent() {
    needs_root!();
    for (method, notified) in [("clone-sigusr1", true), ("clone-nosignal", false)] {
        let run = spawn_run(method, None);
        assert_eq!(run.method("fork"), N, "{method}: {}", run.report["methods"]);
        assert_eq!(run.summary("still_running"), 0, "{method}");
        let with_teardown = run.report["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .filter(|p| {
                p["phases"]["exit_teardown"]
                    .as_u64()
                    .is_some_and(|ns| ns > 0)
            })
            .count() as u64;
        // The root's own exit notifies by SIGCHLD.
        let (teardowns, without) = if notified { (N + 1, 0) } else { (1, N) };
        assert_eq!(with_teardown, teardowns, "{method}");
        assert_eq!(run.summary("exits_without_notify"), without, "{method}");
    }
}

/// Threads of one process in execve at once each have their own attempt: two threads'
/// failing execs are all counted (before, one attempt per process was kept, and 400 came
/// out as a dozen), and a thread's failing execs do not hide the main thread's successful
/// one (before, it was lost). The racing thread dies in the middle of an attempt when the
/// main thread's exec kills it: that attempt is not a failure, and shows nowhere.
#[test]
fn concurrent_execs_of_one_processs_threads_are_each_recorded() {
    needs_root!();
    let w = workload();
    let run = run_traced(
        &[w.to_str().unwrap(), "exec-threads", "200", "/bin/true"],
        |_| {},
    );
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    assert_eq!(run.summary("lost_events"), 0);
    let truth: serde_json::Value =
        serde_json::from_str(run.stdout().lines().next().expect("fp-workload's line")).unwrap();
    assert_eq!(truth["failed"], 400, "the workload's own count");
    if let Err(e) = forkprof_tests::check_exec_threads(&run.report, 200, "/bin/true") {
        panic!("{e}");
    }
}

/// A process killed while one of its threads waits inside vfork (by exit_group, or by
/// another thread's exec): the dying thread's vfork still returns, so the spawn is recorded
/// and its `vfork_wait` ends at the kill, not at the child's exit a second later. The main
/// thread's fork in flight is kept in its process's entry and another thread's by thread id,
/// so the workload kills each kind both ways (`hardening.rs` checks that their windows close).
#[test]
fn a_vfork_whose_thread_is_killed_ends_its_wait_at_the_kill() {
    needs_root!();
    let w = workload();
    let run = run_traced(&[w.to_str().unwrap(), "vfork-killed"], |_| {});
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    assert_eq!(run.summary("lost_events"), 0);
    if let Err(e) = forkprof_tests::check_vfork_killed(&run.report) {
        panic!("{e}");
    }
}

/// A binary run by a path that is not absolute is shown by its absolute path: `./t` in two
/// directories is two binaries (before, one row "./t"), a failed `./missing` names the
/// directory it was looked for in, and fexecve, execveat with a directory descriptor and
/// /proc/self/exe name the file they ran (before: `/dev/fd/3`, `/dev/fd/3/t`,
/// `/proc/self/exe`), a memfd is `/memfd:NAME`, and a directory deeper than the walk gives
/// `…/` and its last names. The ground truth is the workload's own resolution of each path.
#[test]
fn an_exec_path_that_is_not_absolute_is_shown_as_the_binary_it_ran() {
    needs_root!();
    let w = workload();
    let scratch = forkprof_tests::tempdir();
    let dir = scratch.join("exec-paths");
    let run = run_traced(
        &[
            w.to_str().unwrap(),
            "exec-paths",
            dir.to_str().unwrap(),
            "/bin/true",
        ],
        |_| {},
    );
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    let truth = run.stdout();
    let _ = std::fs::remove_dir_all(&scratch);
    match forkprof_tests::check_exec_paths(&run.report, truth.lines().next().unwrap_or("")) {
        Ok(summary) => eprintln!("{summary}"),
        Err(e) => panic!("{e}"),
    }
}

/// The arguments shown are the ones read: an argument past argv's first 1024 bytes is not
/// shown as an empty string (argc still counts it), and an empty argv[0] hides nothing.
#[test]
fn the_arguments_shown_are_the_ones_read() {
    needs_root!();
    let w = workload();
    let big = "x".repeat(100_000);
    let cases: [(&[&str], &[&str], u64); 2] = [
        (
            &["/bin/true", "true", &big, "after-big"],
            &["true", &big[..63]],
            3,
        ),
        (&["/bin/echo", "", "a", "b"], &["", "a", "b"], 3),
    ];
    for (argv, shown, argc) in cases {
        let mut cmd = vec![w.to_str().unwrap(), "execv"];
        cmd.extend_from_slice(argv);
        let run = run_traced(&cmd, |c| {
            c.stdout(Stdio::null());
        });
        assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
        let execs = run.report["processes"][0]["execs"].as_array().unwrap();
        let exec = execs
            .iter()
            .find(|e| e["path"] == argv[0])
            .unwrap_or_else(|| panic!("no exec of {}: {execs:?}", argv[0]));
        let args: Vec<&str> = exec["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args, shown, "{}", argv[0]);
        assert_eq!(exec["argc"], argc, "{}", argv[0]);
    }
}

/// A report that cannot be written says where it was going, and forkprof exits 1. The
/// recording beside it is still whole: the command's exit status and wall time, which are
/// written at its end, are there.
#[test]
fn a_report_that_cannot_be_written_names_its_file() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("run.db");
    let out = Command::new(forkprof())
        .args(["run", "--report", "/dev/full", "-o"])
        .arg(&db)
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write the report to /dev/full"),
        "{err}"
    );
    let out = Command::new(forkprof())
        .args(["report", "--format", "json"])
        .arg(&db)
        .output()
        .unwrap();
    forkprof_tests::succeeded(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["exit"]["code"], 3, "{report}");
    assert!(
        report["wall_ns"].as_u64().is_some_and(|ns| ns > 0),
        "{report}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn threads_are_counted_apart() {
    needs_root!();
    let run = spawn_run("thread", None);
    assert_eq!(run.summary("threads"), N);
    assert_eq!(run.summary("processes"), 1);
    assert_eq!(run.method("thread"), 0);
}

/// A 32-bit process makes its syscalls through the ia32 table, whose numbers collide with
/// x86-64 ones (its execve is x86-64 munmap's 11, its setpgid x86-64 fork's 57). Its children,
/// made by ia32 fork, clone and vfork, are followed with their methods and fork times, their
/// execs timed, and a failed exec's path read from the 32-bit caller; its setpgid and
/// sched_yield start nothing.
#[test]
fn a_32_bit_process_is_followed_through_the_ia32_syscalls() {
    needs_root!();
    let dir = tempdir();
    let bin = dir.join("spawn32");
    forkprof_tests::build_spawn32(&bin).unwrap();
    let path = bin.to_str().unwrap();
    let run = run_traced(&[path], |_| {});
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    match forkprof_tests::check_spawn32(&run.report, path) {
        Ok(detail) => eprintln!("{detail}"),
        Err(e) => panic!("{e}\nreport: {}", run.report["processes"]),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--no-ia32-syscalls`, where trampolines are refused (here by `FORKPROF_TEST_NO_FENTRY=1`,
/// so that every host takes this path), hooks the classic syscall events, which never fire
/// for an ia32 syscall: the 32-bit spawner's four fork-family syscalls are then counted as
/// unseen (`lost.ia32_unseen`), and its children, which no fork window followed, are not in
/// the report. The table says so too. (Where trampolines attach, the option changes
/// nothing: vm-test's `no-ia32-syscalls` check.)
#[test]
fn no_ia32_syscalls_counts_what_a_32_bit_process_spawns() {
    needs_root!();
    let dir = tempdir();
    let bin = dir.join("spawn32");
    forkprof_tests::build_spawn32(&bin).unwrap();
    let path = bin.to_str().unwrap();
    let run = run_traced_with(&["--no-ia32-syscalls"], &[path], |c| {
        c.env("FORKPROF_TEST_NO_FENTRY", "1");
    });
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    let exec = run.report["sources"]["exec"].as_str().unwrap_or_default();
    assert!(exec.contains(SYSCALL_EVENTS_SOURCE), "exec from {exec:?}");
    let unseen = &run.report["summary"]["lost"]["ia32_unseen"];
    assert_eq!(unseen, 4, "summary: {}", run.report["summary"]);
    assert_eq!(run.summary("lost_events"), 4);
    let kids = forkprof_tests::children_of(&run.report, path)
        .unwrap_or_else(|e| panic!("{e}: {}", run.report["processes"]));
    assert!(kids.is_empty(), "children of an unseen fork: {kids:?}");
    let out = Command::new(forkprof())
        .args(["run", "--no-ia32-syscalls", "--", path])
        .env("FORKPROF_TEST_NO_FENTRY", "1")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(
        table.contains("spawns of 32-bit processes unseen 4 (--ia32-syscalls always sees them)"),
        "{table}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--ia32-syscalls on-demand`, where trampolines are refused (here by
/// `FORKPROF_TEST_NO_FENTRY=1`): the classic syscall events, with sys_enter and sys_exit
/// loaded in standby and attached, for ia32 syscalls only, once a followed process execs a
/// 32-bit image. The first 32-bit spawner forks at once after its exec, so each of its four
/// spawns is either followed or counted as unseen, whichever the agent's attach came
/// before; none is lost silently. A second one, started 0.3 s later, is followed whole, as
/// sys_enter and sys_exit alone follow it: the first one's exec woke the agent, which
/// otherwise collects once a second. The 64-bit processes it starts have
/// their syscalls seen once, by the classic events, not again by sys_enter: their dynamic
/// linker counts as many objects as where sys_enter and sys_exit alone see them (each
/// openat counted twice would give more).
#[test]
fn ia32_syscalls_on_demand_follow_32_bit_processes_from_the_first_exec() {
    needs_root!();
    let dir = tempdir();
    let (first, second) = (dir.join("spawn32-first"), dir.join("spawn32-second"));
    forkprof_tests::build_spawn32(&first).unwrap();
    std::fs::copy(&first, &second).unwrap();
    let (first, second) = (first.to_str().unwrap(), second.to_str().unwrap());
    let ld_objects = |report: &serde_json::Value| {
        report["groups"]["binary"]
            .as_array()
            .and_then(|g| g.iter().find(|g| g["binary"] == "/bin/true"))
            .map(|g| g["ld_objects_mean"].clone())
            .unwrap_or_default()
    };
    // The spawner's children, as sys_enter and sys_exit alone see them.
    let without = run_traced_with(&["--ia32-syscalls", "always"], &[second], |c| {
        c.env("FORKPROF_TEST_NO_FENTRY", "1");
    });
    assert_eq!(without.code(), 0, "stderr: {}", without.stderr());
    // 0.3 s apart: `run` without a recording collects once a second unless woken, so the
    // second spawner is followed whole only if the first's exec woke the agent. The last
    // command is `:`, so that the shell does not exec the second spawner in its place.
    let script = format!("{first}; sleep 0.3; {second}; :");
    let run = run_traced_with(
        &["--ia32-syscalls", "on-demand"],
        &["/bin/sh", "-c", &script],
        |c| {
            c.env("FORKPROF_TEST_NO_FENTRY", "1");
        },
    );
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    let exec = run.report["sources"]["exec"].as_str().unwrap_or_default();
    assert!(exec.contains(SYSCALL_EVENTS_SOURCE), "exec from {exec:?}");
    assert!(
        exec.contains("tp_btf sys_enter + tp_btf sys_exit, attached when the first was seen"),
        "exec from {exec:?}"
    );
    let unseen = run.report["summary"]["lost"]["ia32_unseen"]
        .as_u64()
        .unwrap_or(0);
    let early = forkprof_tests::children_of(&run.report, first)
        .unwrap_or_else(|e| panic!("{e}: {}", run.report["processes"]));
    assert_eq!(
        early.len() as u64 + unseen,
        4,
        "the first spawner: {} children followed, {unseen} unseen",
        early.len()
    );
    assert_eq!(run.summary("lost_events"), unseen);
    match forkprof_tests::check_spawn32(&run.report, second) {
        Ok(detail) => eprintln!("{detail}"),
        Err(e) => panic!("{e}\nreport: {}", run.report["processes"]),
    }
    let want = ld_objects(&without.report);
    assert!(
        want.as_f64().is_some_and(|n| n >= 1.0),
        "{}",
        without.report["groups"]
    );
    assert_eq!(ld_objects(&run.report), want, "{}", run.report["groups"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The classic syscall events time a 64-bit spawn as sys_enter and sys_exit do: every exec
/// of a dynamic binary with its dynamic-linker phases (ld.so's arch_prctl argument is read
/// through the task's registers, which a classic event's context does not hold), and each
/// failed attempt of a PATH search with its path (read from the caller's memory at the
/// syscall's return, through those registers too). Nothing is counted as unseen.
#[test]
fn no_ia32_syscalls_times_64_bit_spawns_whole() {
    needs_root!();
    let dir = tempdir();
    let dirs: Vec<_> = ["a", "b"].iter().map(|d| dir.join(d)).collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    // Where this system keeps `env` and `true` (/usr/bin, or /bin without merged /usr).
    let bin = ["/usr/bin", "/bin"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|d| d.join("env").exists() && d.join("true").exists())
        .expect("env and true in /usr/bin or /bin");
    let search: Vec<std::path::PathBuf> = dirs.iter().cloned().chain([bin.clone()]).collect();
    let path = std::env::join_paths(&search).unwrap();
    // Each round: env's execvp of a name found nowhere (an ENOENT attempt per directory,
    // exit 127), then of `true`, found in the last directory after two.
    let script = "for i in 1 2 3 4 5 6 7 8; do env fp-not-here 2>/dev/null; env true; done";
    let run = run_traced_with(&["--no-ia32-syscalls"], &["/bin/sh", "-c", script], |c| {
        c.env("PATH", &path).env("FORKPROF_TEST_NO_FENTRY", "1");
    });
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    let exec = run.report["sources"]["exec"].as_str().unwrap_or_default();
    assert!(exec.contains(SYSCALL_EVENTS_SOURCE), "exec from {exec:?}");
    assert!(run.report["summary"]["lost"]["ia32_unseen"].is_null());
    assert_eq!(run.summary("lost_events"), 0);
    let attempts = run.exec_attempts();
    let mut want_failed = Vec::new();
    for _ in 0..8 {
        for d in &search {
            want_failed.push((d.join("fp-not-here").display().to_string(), 2));
        }
        for d in &dirs {
            want_failed.push((d.join("true").display().to_string(), 2));
        }
    }
    want_failed.sort();
    let mut failed: Vec<(String, i64)> =
        attempts.iter().filter(|(_, e)| *e != 0).cloned().collect();
    failed.sort();
    assert_eq!(failed, want_failed);
    let (env, truth) = (bin.join("env"), bin.join("true"));
    let succeeded = |p: &std::path::Path| {
        attempts
            .iter()
            .filter(|a| std::path::Path::new(&a.0) == p && a.1 == 0)
            .count()
    };
    assert_eq!(succeeded(&env), 16, "{attempts:?}");
    assert_eq!(succeeded(&truth), 8, "{attempts:?}");
    // Every `true` process: a dynamic binary's exec, its dynamic linker bracketed.
    let trues: Vec<&serde_json::Value> = run.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["binary"].as_str().map(std::path::Path::new) == Some(truth.as_path()))
        .collect();
    assert_eq!(trues.len(), 8, "{}", run.report["processes"]);
    for p in trues {
        for phase in ["fork", "exec", "ld_start", "ld_map", "ld_reloc_init"] {
            assert!(
                p["phases"][phase].as_f64().is_some_and(|ns| ns > 0.0),
                "{phase} missing: {p}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Empty directories `names` in `dir`, for a PATH to search.
fn empty_dirs(dir: &std::path::Path, names: &[&str]) -> Vec<std::path::PathBuf> {
    let dirs: Vec<_> = names.iter().map(|d| dir.join(d)).collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    dirs
}

#[test]
fn execvp_path_search_is_one_finding_with_every_failed_attempt() {
    needs_root!();
    let dir = tempdir();
    let dirs = empty_dirs(&dir, &["a", "b", "c"]);
    // In the middle directory the name exists but is not executable: EACCES.
    let blocked = dirs[1].join("fp-nothing");
    std::fs::write(&blocked, "not a program").unwrap();
    std::fs::set_permissions(&blocked, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = std::env::join_paths(&dirs).unwrap();
    let w = workload();
    let run = run_traced(&[w.to_str().unwrap(), "execvp", "fp-nothing"], |c| {
        c.env("PATH", &path);
    });
    assert_eq!(run.code(), 127, "stderr: {}", run.stderr());
    let failed: Vec<(String, i64)> = run
        .exec_attempts()
        .into_iter()
        .filter(|(_, errno)| *errno != 0)
        .collect();
    let want: Vec<(String, i64)> = vec![
        (
            dirs[0].join("fp-nothing").display().to_string(),
            libc::ENOENT as i64,
        ),
        (
            dirs[1].join("fp-nothing").display().to_string(),
            libc::EACCES as i64,
        ),
        (
            dirs[2].join("fp-nothing").display().to_string(),
            libc::ENOENT as i64,
        ),
    ];
    assert_eq!(failed, want);
    assert_eq!(run.summary("failed_execs"), 3);
    // One finding, not one row per directory: the attempts count in the row of the binary
    // that made them (the workload, which exec'd), beside their exec_failed time, and the
    // row's JSON lists every path tried.
    let rows = run.report["groups"]["binary"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|g| g["binary"].as_str().unwrap()).collect();
    assert!(
        names.iter().all(|b| !b.contains("fp-nothing")),
        "a row per attempt: {names:?}"
    );
    let row = rows
        .iter()
        .find(|g| g["binary"] == w.to_str().unwrap())
        .expect("the workload's row");
    assert_eq!(row["failed_execs"], 3, "{row}");
    assert_eq!(row["phases"]["exec_failed"]["count"], 1, "{row}");
    let paths: Vec<String> = want.iter().map(|(p, _)| p.clone()).collect();
    let listed: Vec<String> = row["failed_exec_paths"]
        .as_object()
        .expect("failed_exec_paths")
        .keys()
        .cloned()
        .collect();
    assert_eq!(listed, paths, "{row}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PATH search hint, from a real search whose PATH the test sets: `env` looks for `true`
/// in three empty directories before /usr/bin, five times, so the hint says what was looked
/// for, how many paths a search tried, where, and where it ended.
#[test]
fn the_path_search_hint_names_what_was_searched_and_where() {
    needs_root!();
    let dir = tempdir();
    let dirs = empty_dirs(&dir, &["a", "b", "c"]);
    let true_dir = std::fs::canonicalize("/usr/bin/true")
        .ok()
        .and_then(|p| p.parent().map(|d| d.display().to_string()))
        .expect("/usr/bin/true");
    let mut path: Vec<_> = dirs.clone();
    path.push(true_dir.clone().into());
    let path = std::env::join_paths(&path).unwrap();
    // dash finds `env` with stat(), not exec; `env` finds `true` with execvp.
    let run = run_traced(
        &[
            "/bin/sh",
            "-c",
            // `:` last, so that the fifth `env` is the shell's child under any /bin/sh.
            "env true; env true; env true; env true; env true; :",
        ],
        |c| {
            c.env("PATH", &path);
        },
    );
    assert_eq!(run.code(), 0, "stderr: {}", run.stderr());
    assert_eq!(run.summary("failed_execs"), 15);
    let hints = run.report["hints"].as_array().expect("hints");
    let hint = hints
        .iter()
        .find(|h| h["rule"] == "path_search")
        .unwrap_or_else(|| panic!("no PATH search hint: {hints:?}"));
    let text = hint["text"].as_str().unwrap();
    let want = "execvp PATH search: 1.5 failed execs per success in `sh` (15 failed, ";
    assert!(text.starts_with(want), "{text}");
    let want = format!(
        "), all for `true`: 3.0 a search, in {}, {}, {} ahead of {true_dir}; put {true_dir} \
         first in PATH or exec absolute paths",
        dirs[0].display(),
        dirs[1].display(),
        dirs[2].display()
    );
    assert!(text.ends_with(&want), "{text}\nwant the end: {want}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// forkprof resolves CMD itself before tracing starts: its own PATH search is not charged
/// to the command (it used to show as failed execs and rows with 0 processes).
#[test]
fn forkprofs_own_path_search_is_not_charged_to_the_command() {
    needs_root!();
    let run = run_traced(&["true"], |c| {
        c.env("PATH", "/nonexistent-a:/nonexistent-b:/usr/bin:/bin");
    });
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert_eq!(run.summary("failed_execs"), 0, "{}", run.report["summary"]);
    let rows: Vec<&str> = run.report["groups"]["binary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["binary"].as_str().unwrap())
        .collect();
    assert!(rows.iter().all(|b| !b.contains("nonexistent")), "{rows:?}");
    // argv[0] is still what the user typed.
    let argv0 = &run.report["processes"][0]["execs"][0]["args"][0];
    assert_eq!(argv0, "true", "{}", run.report["processes"][0]);
}

#[test]
fn exit_statuses_propagate() {
    needs_root!();
    let w = workload();
    let w = w.to_str().unwrap();
    for (cmd, code) in [
        (vec![w, "exit", "0"], 0),
        (vec![w, "exit", "7"], 7),
        (vec![w, "kill", "9"], 137),
        (vec!["sh", "-c", "exit 3"], 3),
    ] {
        let run = run_traced(&cmd, |_| {});
        assert_eq!(run.code(), code, "{cmd:?}: {}", run.stderr());
        let exit = &run.report["exit"];
        if code == 137 {
            assert_eq!(exit["signal"], 9, "{exit}");
        } else {
            assert_eq!(exit["code"], code, "{exit}");
        }
    }
}

#[test]
fn missing_command_exits_127_like_a_shell() {
    needs_root!();
    let out = Command::new(forkprof())
        .args(["run", "--", "fp-no-such-command-anywhere"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim(),
        "forkprof: fp-no-such-command-anywhere: command not found"
    );
    // An empty name is no command either (it used to be "Permission denied", 126).
    let out = Command::new(forkprof())
        .args(["run", "--", ""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "forkprof: : command not found"
    );
    // A script that exists, whose interpreter does not: the kernel says ENOENT, and
    // forkprof says what is missing.
    let dir = tempdir();
    let script = dir.join("fp-bad-interpreter.sh");
    std::fs::write(&script, "#!/nonexistent/fp-interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(forkprof())
        .args(["run", "--"])
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("its interpreter (#! line or ELF loader) was not found"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn forwards_sigterm_and_exits_128_plus_signal() {
    needs_root!();
    let mut child = Command::new(forkprof())
        .args(["run", "--json", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until sleep runs under forkprof (it is forkprof's child).
    let sleeper = forkprof_tests::wait_for_child(child.id(), "sleep");
    // SAFETY: plain syscall.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(!std::path::Path::new(&format!("/proc/{sleeper}")).exists());
}

#[test]
fn unrelated_processes_never_appear() {
    needs_root!();
    // A uniquely named copy of `true`, run by an untraced shell while a traced run is going.
    let dir = tempdir();
    let outsider = dir.join("fp-outsider-bin");
    std::fs::copy("/bin/true", &outsider).unwrap();
    let script = format!("for i in $(seq 100); do {}; done", outsider.display());
    let noise = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            Command::new("sh").args(["-c", &script]).status().unwrap();
        }
    });
    let w = workload();
    let run = run_traced(
        &[
            "sh",
            "-c",
            // `:` last: a shell that execs its last command in place (bash, busybox) would
            // otherwise be `sleep`, and the count below one fewer.
            &format!("{} spawn fork 50 /bin/true; sleep 1; :", w.display()),
        ],
        |_| {},
    );
    noise.join().unwrap();
    assert_eq!(run.code(), 0);
    let text = run.report.to_string();
    assert!(
        !text.contains("fp-outsider-bin"),
        "outsider leaked into the report"
    );
    // sh, the workload and its 50 children, sleep: nothing else.
    assert_eq!(run.summary("processes"), 53, "{}", run.report["summary"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unprivileged_run_gets_one_clear_line_and_exit_1() {
    needs_root!("to drop to nobody with setpriv");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(forkprof())
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("CAP_BPF") && err.contains("sudo"), "{err}");
}

#[test]
fn under_sudo_the_command_runs_as_the_invoking_user() {
    needs_root!();
    let dir = tempdir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let report = dir.join("report.txt");
    let out = Command::new(forkprof())
        .args(["run", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", "id -u; id -g; id -G; echo $HOME"])
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .env("SUDO_USER", "nobody")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "65534", "uid");
    assert_eq!(lines[1], "65534", "gid");
    assert!(
        !lines[2].split(' ').any(|g| g == "0"),
        "root group kept: {}",
        lines[2]
    );
    assert_eq!(lines[3], "/nonexistent", "HOME of nobody");
    let meta = std::fs::metadata(&report).unwrap();
    assert_eq!(meta.uid(), 65534, "report owned by the invoking user");
    assert_eq!(meta.mode() & 0o777, 0o600, "report not world-readable");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under sudo, an output path is opened as the invoking user would open it: a file of
/// root's, a symlink to one, or a directory only root may write is refused with exit 2 and
/// left as it was (before, root opened the path and then gave the file to the user, so
/// `--report /etc/shadow` handed /etc/shadow over).
#[test]
fn under_sudo_an_output_path_is_opened_as_the_invoking_user() {
    needs_root!();
    let dir = tempdir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let roots = dir.join("roots");
    std::fs::write(&roots, "root's\n").unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&roots, dir.join("link")).unwrap();
    let closed = dir.join("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let as_nobody = |args: &[&std::ffi::OsStr]| {
        Command::new(forkprof())
            .args(args)
            .env("SUDO_UID", "65534")
            .env("SUDO_GID", "65534")
            .env("SUDO_USER", "nobody")
            .output()
            .unwrap()
    };
    let refused = [
        ("--report", roots.clone()),
        ("--report", dir.join("link")),
        ("-o", closed.join("x.db")),
        ("-o", dir.join("link")),
    ];
    for (flag, path) in &refused {
        let out = as_nobody(&[
            "run".as_ref(),
            flag.as_ref(),
            path.as_os_str(),
            "--".as_ref(),
            "true".as_ref(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {}: {err}",
            path.display()
        );
        assert!(err.contains("not writable"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let meta = std::fs::metadata(&roots).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (0, 0o644),
        "root's file kept"
    );
    assert_eq!(std::fs::read_to_string(&roots).unwrap(), "root's\n");
    assert_eq!(
        std::fs::read_dir(&closed).unwrap().count(),
        0,
        "nothing created"
    );
    // Where the user may write, the recording and its report are the user's, 0600.
    let (db, report) = (dir.join("ok.db"), dir.join("ok.txt"));
    let out = as_nobody(&[
        "run".as_ref(),
        "-o".as_ref(),
        db.as_os_str(),
        "--report".as_ref(),
        report.as_os_str(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for path in [&db, &report] {
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o777),
            (65534, 65534, 0o600),
            "{}",
            path.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_runs_its_built_in_workloads_and_explains_the_ratios() {
    needs_root!();
    let out = Command::new(forkprof())
        .args([
            "bench",
            "--json",
            "--iterations",
            "60",
            "--rows",
            "_exit",
            "--rows",
            "fork+exec static",
            "--rows",
            "fork rss 0",
            "--rows",
            "fork rss 64",
            "--rows",
            "256 MiB",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The huge-page row runs where the kernel gives transparent huge pages, and says why not
    // elsewhere.
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|m| !m.contains("[never]"));
    if !thp {
        assert_eq!(
            doc["skipped"],
            serde_json::json!(["fork 256 MiB huge pages"])
        );
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("skipped: transparent huge pages are off"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Pinned by default, to a CPU forkprof may use.
    assert!(doc["cpu"].as_u64().is_some(), "{}", doc["cpu"]);
    let rows = doc["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "fork+_exit static parent",
            "fork+_exit dynamic parent",
            "vfork+_exit static parent",
            "vfork+_exit dynamic parent",
            "fork+exec static",
            "vfork+exec static",
            "fork rss 0 MiB",
            "fork rss 64 MiB",
            "fork rss 256 MiB",
            "fork 256 MiB huge pages"
        ][..if thp { 10 } else { 9 }]
    );
    for r in rows {
        assert!(r["us_per_iter"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["phases_us"]["fork"].as_f64().unwrap() > 0.0, "{r}");
        assert!(
            r["phases_us"]["exit_teardown"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }
    // A static binary's start-up is measured: the phases cover most of its wall time.
    let exec_static = &rows[4];
    assert!(
        exec_static["phases_us"]["static_start"].as_f64().unwrap() > 0.0,
        "{exec_static}"
    );
    assert!(
        exec_static["spawn_cost_coverage"].as_f64().unwrap() > 0.5,
        "{exec_static}"
    );
    let fork64 = &rows[7]["phases_us"];
    assert!(
        fork64["pagetable_copy"].as_f64().unwrap() > 0.5 * fork64["fork"].as_f64().unwrap(),
        "64 MiB parent: page-table copy is most of fork: {fork64}"
    );
    let ratios = doc["ratios"].as_array().unwrap();
    let ratio = |name: &str| {
        ratios
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {ratios:?}"))
    };
    for name in [
        "vfork/fork, static parent",
        "vfork/fork, dynamic parent",
        "dynamic/static parent, fork+_exit",
        "fork slope per GiB of RSS",
    ] {
        let r = ratio(name);
        // Measured with the two drivers taking turns, not from the rows.
        assert_eq!(r["measured"], "turns", "{r}");
        assert!(r["a_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    // vfork skips the page-table copy and the child's exit of a copied address space.
    assert!(
        ratio("vfork/fork, static parent")["value"]
            .as_f64()
            .unwrap()
            < 1.0
    );
    // With huge pages, fork copies one entry per 2 MiB instead of 512 4 KiB ones: the
    // 256 MiB's share of the page-table copy falls 512 times, and what is left is the
    // driver's other mappings, which the empty parent copies too (`fork rss 0 MiB`, a
    // hundredth of the 256 MiB copy on the hosts measured). So a quarter is far above what
    // huge pages leave, and far below the small pages' copy.
    if thp {
        let copy = |row: &serde_json::Value| row["phases_us"]["pagetable_copy"].as_f64().unwrap();
        let (small, huge) = (copy(&rows[8]), copy(&rows[9]));
        assert!(
            huge < 0.25 * small,
            "page-table copy of 256 MiB: {huge:.1} µs in huge pages, {small:.1} in small ones"
        );
        let r = ratio("huge/small pages, fork of 256 MiB");
        assert_eq!(r["measured"], "turns", "{r}");
        assert!(r["value"].as_f64().unwrap() < 0.5, "{r}");
    }
    // A 64 MiB parent forks slower than an empty one, so the slope is positive.
    assert!(
        ratio("fork slope per GiB of RSS")["value"]
            .as_f64()
            .unwrap()
            > 0.0
    );
}

/// Where tracefs is mounted nowhere (as on a host whose init does not mount it), `doctor`
/// mounts it as `run` does, so that the syscall source it names is the one `run` would use:
/// the classic events, not sys_enter/sys_exit. Run in a mount namespace of its own, so that
/// the host's tracefs stays mounted for the other tests.
#[test]
fn doctor_names_runs_syscall_source_where_tracefs_is_not_mounted() {
    needs_root!();
    let script = r#"
        for d in /sys/kernel/debug/tracing /sys/kernel/debug /sys/kernel/tracing; do
            umount "$d" 2>/dev/null
        done
        if grep -q ' tracefs ' /proc/mounts; then
            echo "tracefs still mounted in the namespace" >&2
            exit 99
        fi
        "$0" doctor --json
    "#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(forkprof())
        // fentry refused, as under lockdown: the classic events are the source run uses
        .env("FORKPROF_TEST_NO_FENTRY", "1")
        .output()
        .expect("unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains("mounted tracefs at /sys/kernel/tracing"),
        "{stderr}"
    );
    let doctor: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor's JSON");
    let fork = doctor["phases"]["fork"].as_str().unwrap_or_default();
    assert!(
        fork.starts_with(SYSCALL_EVENTS_SOURCE),
        "fork from {fork:?}"
    );
    // the namespace's mounts went with it
    assert!(std::path::Path::new("/sys/kernel/tracing/events").is_dir());
}

/// `doctor` reads the kernel's lockdown mode where securityfs is mounted at its usual place,
/// and where it is mounted nowhere (this VM's init mounts none): through a mount of its own,
/// gone when it is done. The truth is the test's own mount of securityfs, read first. Run in
/// a mount namespace of its own, so that the host's mounts stay as they were.
#[test]
fn doctor_reads_the_lockdown_mode_with_or_without_securityfs_mounted() {
    needs_root!();
    let dir = tempdir();
    let script = r#"
        t=$(mktemp -d) && mount -t securityfs none "$t" || exit 98
        cat "$t/lockdown" > "$1/truth" 2>/dev/null
        umount "$t" && rmdir "$t" || exit 98
        umount /sys/kernel/security 2>/dev/null
        grep -q ' securityfs ' /proc/self/mountinfo && exit 99
        "$0" doctor --json > "$1/unmounted.json" || exit 97
        grep ' securityfs ' /proc/self/mountinfo > "$1/left"
        mount -t securityfs none /sys/kernel/security || exit 96
        "$0" doctor --json > "$1/mounted.json" || exit 95
    "#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(forkprof())
        .arg(&dir)
        .output()
        .expect("unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let truth = read("truth").trim().to_string();
    // No lockdown LSM: no file, and doctor says null.
    let expected = (!truth.is_empty()).then_some(truth);
    for case in ["unmounted", "mounted"] {
        let doctor: serde_json::Value =
            serde_json::from_str(&read(&format!("{case}.json"))).expect("doctor's JSON");
        assert_eq!(
            doctor["lockdown"].as_str(),
            expected.as_deref(),
            "securityfs {case}"
        );
    }
    assert_eq!(read("left"), "", "doctor left securityfs mounted");
    let _ = std::fs::remove_dir_all(dir);
}
