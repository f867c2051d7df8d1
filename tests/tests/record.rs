//! Recordings end to end: `run -o`, `record` (system-wide, -p, --duration, SIGKILL), and
//! `report` on good and bad files.
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use forkprof_tests::{
    forkprof, needs_root, run_traced_with, sh, sqlite, tempdir, wait_until_recording, workload,
};
use serde_json::Value;

fn report_json(file: &Path, extra: &[&str]) -> (i32, Value, String) {
    let out = Command::new(forkprof())
        .arg("report")
        .arg(file)
        .args(["--format", "json"])
        .args(extra)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn run_o_records_what_run_reports() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("run.db");
    let w = workload();
    let run = run_traced_with(
        &["-o", db.to_str().unwrap()],
        &[w.to_str().unwrap(), "spawn", "vfork", "30", "/bin/true"],
        |_| {},
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let (code, rep, err) = report_json(&db, &["--processes"]);
    assert_eq!(code, 0, "{err}");
    for key in [
        "processes",
        "execs",
        "failed_execs",
        "threads",
        "lost_events",
    ] {
        assert_eq!(
            rep["summary"][key], run.report["summary"][key],
            "summary.{key}"
        );
    }
    assert_eq!(rep["methods"], run.report["methods"]);
    assert_eq!(rep["phases"]["exec"], run.report["phases"]["exec"]);
    // One recording, one set of numbers: the wall time (and so the rates and the share of
    // wall time) and the hints are those `run` printed.
    for key in ["wall_ns", "hints"] {
        assert_eq!(rep[key], run.report[key], "{key}");
    }
    for key in ["spawn_rate_mean_per_s", "spawn_cost_share_of_wall"] {
        assert_eq!(
            rep["summary"][key], run.report["summary"][key],
            "summary.{key}"
        );
    }
    assert_eq!(rep["exit"]["code"], 0);
    // The derived tables, as people query them from the sqlite3 shell.
    assert_eq!(sqlite(&db, "SELECT count(*) FROM processes"), "31");
    assert_eq!(
        sqlite(&db, "SELECT count(*) FROM execs WHERE errno = 0"),
        "31"
    );
    assert_eq!(
        sqlite(
            &db,
            "SELECT count(DISTINCT pid) FROM phases WHERE phase = 'vfork_wait'"
        ),
        "30"
    );
    let meta = std::fs::metadata(&db).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The kernel holds a dynamic-linker window's record until the process exits, and sends
/// both as one: each record must still come, once. A process that execs again sends the
/// first image's with its next exec (`env` execs `true`: two windows, one process), and one
/// still running when the trace ends has its record read from the kernel's process state
/// (the script waits a second, so that the sleeper's dynamic linker is done, which takes
/// about a millisecond).
#[test]
fn dynamic_linker_records_come_once_each_from_every_image() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("held.db");
    let pidfile = dir.join("sleep.pid");
    let script = format!(
        "/usr/bin/env /bin/true; /bin/sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {}; \
         /bin/sleep 1",
        pidfile.display()
    );
    let run = run_traced_with(
        &["-o", db.to_str().unwrap()],
        &["sh", "-c", &script],
        |_| {},
    );
    let sleeper: u32 = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .expect("the script wrote the sleeper's pid");
    let _ = Command::new("kill").arg(sleeper.to_string()).status();
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let env_pid = sqlite(
        &db,
        "SELECT pid FROM execs WHERE path = '/usr/bin/env' AND errno = 0",
    );
    assert!(!env_pid.is_empty(), "no exec of env recorded");
    // env's window and true's, in that order, each closed at ld.so's last syscall.
    assert_eq!(
        sqlite(
            &db,
            &format!(
                "SELECT group_concat(outcome || ':' || (ld_map_ns > 0), ' ') FROM \
                 (SELECT * FROM lds WHERE pid = {env_pid} ORDER BY ts_ns)"
            )
        ),
        "complete:1 complete:1",
        "the windows of env and of the true it exec'd"
    );
    assert_eq!(
        sqlite(
            &db,
            &format!("SELECT count(*) FROM exits WHERE pid = {env_pid}")
        ),
        "1"
    );
    // The sleeper never exited while traced: its window's record was still held.
    assert_eq!(
        sqlite(
            &db,
            &format!(
                "SELECT count(*), min(outcome), min(ld_map_ns > 0) FROM lds WHERE pid = {sleeper}"
            )
        ),
        "1|complete|1",
        "the still-running sleeper's window"
    );
    assert_eq!(
        sqlite(
            &db,
            &format!("SELECT count(*) FROM exits WHERE pid = {sleeper}")
        ),
        "0"
    );
    // Every dynamic image's window, once: as many as successful execs of a dynamic binary
    // (all of them here: sh, env, true, sleep).
    assert_eq!(
        sqlite(&db, "SELECT count(*) FROM lds"),
        sqlite(&db, "SELECT count(*) FROM execs WHERE errno = 0"),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn recording_under_sudo_belongs_to_the_user_and_no_args_drops_arguments() {
    needs_root!();
    let dir = tempdir();
    // A directory the user may write: the recording is created as that user.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let db = dir.join("user.db");
    let out = Command::new(forkprof())
        .args(["run", "--no-args", "--report", "/dev/null", "-o"])
        .arg(&db)
        .args(["--", "sh", "-c", "/bin/echo secret-token >/dev/null"])
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::metadata(&db).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o600));
    assert_eq!(
        sqlite(&db, "SELECT count(*) FROM execs WHERE args IS NOT NULL"),
        "0"
    );
    assert_eq!(sqlite(&db, "SELECT max(argc) FROM execs"), "3");
    let bytes = std::fs::read(&db).unwrap();
    assert!(
        !bytes.windows(12).any(|w| w == b"secret-token"),
        "--no-args must not store arguments"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A uniquely named copy of `true`, run N times by an untraced shell.
fn outsider(dir: &Path, n: u32) -> (std::path::PathBuf, String) {
    let bin = dir.join("fp-record-probe");
    std::fs::copy("/bin/true", &bin).unwrap();
    (
        bin.clone(),
        format!("for i in $(seq {n}); do {}; done", bin.display()),
    )
}

/// The report's row for `binary`, by its full path: a system-wide recording also sees other
/// tests' copies of the probe, which run at the same time from their own directories.
fn binary_row<'a>(rep: &'a Value, binary: &Path) -> Option<&'a Value> {
    let binary = binary.to_str().unwrap();
    rep["groups"]["binary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["binary"].as_str() == Some(binary))
}

/// Runs `fp-workload spawn METHOD SPAWNS BIN` and returns its status.
fn spawn_probe(method: &str, spawns: u64, bin: &Path) -> std::process::ExitStatus {
    Command::new(workload())
        .args(["spawn", method, &spawns.to_string()])
        .arg(bin)
        .stdout(Stdio::null())
        .status()
        .unwrap()
}

/// The report of recording `db` holds `spawns` processes of `bin` and lost nothing.
fn every_probe_recorded(db: &Path, bin: &Path, spawns: u64) {
    let (code, rep, err) = report_json(db, &[]);
    assert_eq!(code, 0, "{err}");
    let row = binary_row(&rep, bin).expect("probe binary recorded");
    assert_eq!(row["processes"], spawns);
    assert_eq!(rep["summary"]["lost_events"], 0);
}

/// `forkprof record -o DB`, system-wide until SIGINT, its stderr piped.
fn record_system_wide(db: &Path) -> std::process::Child {
    Command::new(forkprof())
        .args(["record", "-o"])
        .arg(db)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn record_system_wide_for_a_duration() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("sys.db");
    let (bin, script) = outsider(&dir, 40);
    let mut rec = Command::new(forkprof())
        .args(["record", "--duration", "3s", "-o"])
        .arg(&db)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(&mut rec);
    sh(&script);
    let status = rec.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let (code, rep, err) = report_json(&db, &[]);
    assert_eq!(code, 0, "{err}");
    let row = binary_row(&rep, &bin).expect("probe binary recorded");
    assert_eq!(row["processes"], 40);
    assert_eq!(rep["summary"]["lost_events"], 0);
    // `record` keeps no trace: its derived tables are read back from the file at the end,
    // and hold every process the report of the file counts.
    assert_eq!(
        sqlite(&db, "SELECT count(*) FROM processes"),
        rep["summary"]["processes"].to_string()
    );
    let probe = format!("'{}'", bin.display());
    assert_eq!(
        sqlite(
            &db,
            &format!("SELECT count(*) FROM processes WHERE binary = {probe} AND exit_code = 0")
        ),
        "40"
    );
    assert_eq!(
        sqlite(
            &db,
            &format!(
                "SELECT count(DISTINCT pid) FROM phases JOIN processes USING (pid, start_ns) \
                 WHERE binary = {probe} AND phase = 'exec'"
            )
        ),
        "40"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C again once `record` says it derives its processes and phases tables (a read-back
/// of the whole file, seconds for a million processes) leaves them out: the recording is finished
/// without them, with every record in it, and says so (exit 1); `report` reads it whole.
#[test]
fn record_stopped_again_while_deriving_keeps_every_record() {
    needs_root!();
    // Enough processes that the stop (the programs' detach, the last commit, then the
    // derivation, about 30 µs a process) outlasts the signal's way from the line that
    // announces it.
    const SPAWNS: u32 = 8000;
    let dir = tempdir();
    let db = dir.join("again.db");
    let bin = dir.join("fp-again-probe");
    std::fs::copy("/bin/true", &bin).unwrap();
    let mut rec = record_system_wide(&db);
    let lines = forkprof_tests::stderr_lines(&mut rec);
    let mut said = Vec::new();
    let mut until = |start: &str| loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no line {start:?}: {}", said.join("\n")));
        let found = line.starts_with(start);
        said.push(line);
        if found {
            break;
        }
    };
    until("forkprof: recording");
    assert!(spawn_probe("vfork", SPAWNS.into(), &bin).success());
    // SAFETY: plain syscall.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    until("forkprof: tracing stopped; deriving");
    // SAFETY: plain syscall.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let status = rec.wait().unwrap();
    said.extend(lines.iter());
    let said = said.join("\n");
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains("stopped by a signal")
            && said.contains("lacks its processes and phases tables"),
        "{said}"
    );
    assert_eq!(
        sqlite(
            &db,
            "SELECT (SELECT count(*) FROM processes) + (SELECT count(*) FROM phases)"
        ),
        "0"
    );
    every_probe_recorded(&db, &bin, SPAWNS.into());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `forkprof record --cgroup GROUP -o DB FLAGS` (with `FORKPROF_TEST_NO_FENTRY=1`) of a new
/// group `name`/spawner of `groups`, into which a shell moves first, so that the recording
/// arms its hooks before it says it records; the shell then runs `script` once told to.
/// Returns once the shell and the recording (stopped by SIGINT) have both exited 0.
fn record_group_running(
    groups: &mut forkprof_tests::Groups,
    db: &Path,
    flags: &[&str],
    env: &[(&str, &str)],
    script: &str,
) {
    let group = groups.make("spawner");
    let mut shell = Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo $$ > {}/cgroup.procs && read go && {script}",
                group.display()
            ),
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let procs = group.join("cgroup.procs");
    forkprof_tests::wait_for("the shell to move in", Duration::from_secs(10), || {
        let pids = std::fs::read_to_string(&procs).unwrap_or_default();
        (!pids.trim().is_empty()).then_some(())
    });
    let mut rec = Command::new(forkprof())
        .arg("record")
        .args(flags)
        .arg("--cgroup")
        .arg(groups.shown("spawner"))
        .arg("-o")
        .arg(db)
        .env("FORKPROF_TEST_NO_FENTRY", "1")
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(&mut rec);
    use std::io::Write as _;
    writeln!(shell.stdin.take().unwrap(), "go").unwrap();
    assert!(shell.wait().unwrap().success());
    // SAFETY: plain syscall.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    assert_eq!(rec.wait().unwrap().code(), Some(0));
}

/// A recording's report of two runs of the spawn32 fixture, `first` and then `second`, with
/// the hooks for ia32 syscalls attached on demand: each of the first's four spawns is
/// followed or counted unseen (none lost silently), and the second is followed whole.
fn check_two_spawners(rep: &Value, first: &Path, second: &Path) {
    let unseen = rep["summary"]["lost"]["ia32_unseen"].as_u64().unwrap_or(0);
    let early = forkprof_tests::children_of(rep, first.to_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {}", rep["processes"]));
    assert_eq!(
        early.len() as u64 + unseen,
        4,
        "the first spawner: {} children followed, {unseen} unseen",
        early.len()
    );
    match forkprof_tests::check_spawn32(rep, second.to_str().unwrap()) {
        Ok(detail) => eprintln!("{detail}"),
        Err(e) => panic!("{e}\nreport: {}", rep["processes"]),
    }
}

/// `record --cgroup --no-ia32-syscalls`, where trampolines are refused (here by
/// `FORKPROF_TEST_NO_FENTRY=1`, so that every host takes this path): the 32-bit spawner in
/// the group makes four fork-family syscalls that the classic syscall events skip, and each
/// is counted as unseen once the group's hooks are armed, its child not followed. The count
/// is kept in the recording for `report`. Scoped to a group so that nothing else on the
/// host counts.
#[test]
fn record_no_ia32_syscalls_keeps_the_count_of_what_it_did_not_see() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("ia32.db");
    let bin = dir.join("spawn32");
    forkprof_tests::build_spawn32(&bin).unwrap();
    let mut groups = forkprof_tests::Groups::new("ia32");
    let script = format!("exec {}", bin.display());
    record_group_running(&mut groups, &db, &["--no-ia32-syscalls"], &[], &script);
    let (code, rep, err) = report_json(&db, &[]);
    assert_eq!(code, 0, "{err}");
    let exec = rep["sources"]["exec"].as_str().unwrap_or_default();
    assert!(
        exec.contains(forkprof_tests::SYSCALL_EVENTS_SOURCE),
        "exec from {exec:?}"
    );
    assert_eq!(
        rep["summary"]["lost"]["ia32_unseen"], 4,
        "summary: {}",
        rep["summary"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `record --cgroup` by default (`--ia32-syscalls on-demand`) where trampolines are refused
/// (here by `FORKPROF_TEST_NO_FENTRY=1`): the classic events are armed with the group's
/// hooks, sys_enter and sys_exit wait in standby, and once the first 32-bit spawner in the
/// group has exec'd they attach. Each of its four spawns is followed or counted; a second
/// spawner, two seconds later, is followed whole. The recording's sources, written at its
/// start, are written again at its end, and say the hooks were attached.
#[test]
fn record_attaches_the_ia32_hooks_once_a_32_bit_process_is_seen() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("ia32-on-demand.db");
    let (first, second) = (dir.join("spawn32-first"), dir.join("spawn32-second"));
    forkprof_tests::build_spawn32(&first).unwrap();
    std::fs::copy(&first, &second).unwrap();
    let mut groups = forkprof_tests::Groups::new("ia32od");
    // `:` last, so that the shell does not exec the second spawner in its place.
    let script = format!("{} && sleep 2 && {}; :", first.display(), second.display());
    record_group_running(&mut groups, &db, &[], &[], &script);
    let (code, rep, err) = report_json(&db, &["--processes"]);
    assert_eq!(code, 0, "{err}");
    let exec = rep["sources"]["exec"].as_str().unwrap_or_default();
    // Attached once: the hooks linger 10 s after the first spawner, and the second comes
    // within them.
    assert!(
        exec.starts_with(forkprof_tests::SYSCALL_EVENTS_SOURCE)
            && exec.contains(
                "tp_btf sys_enter + tp_btf sys_exit, attached when the first was seen, \
                 --ia32-syscalls on-demand"
            ),
        "exec from {exec:?}"
    );
    check_two_spawners(&rep, &first, &second);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--ia32-syscalls on-demand` detaches sys_enter and sys_exit once no followed 32-bit
/// process has been left for their linger (200 ms here, `FORKPROF_TEST_IA32_LINGER_MS`; 10 s
/// by default), and attaches them again for the next. The first spawner in the group runs,
/// and the hooks go while the shell sleeps. Then `wait32`, a 32-bit process, sleeps a second
/// (five lingers) spawning nothing, and execs the second spawner: the hooks, attached again at
/// its exec, stay while it lives, so the second spawner is followed whole. Its note says the
/// hooks were attached twice (three times if they had gone during wait32's sleep).
#[test]
fn record_detaches_the_ia32_hooks_once_no_32_bit_process_is_left() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("ia32-detach.db");
    let (first, second, wait32) = (
        dir.join("spawn32-first"),
        dir.join("spawn32-second"),
        dir.join("wait32"),
    );
    forkprof_tests::build_spawn32(&first).unwrap();
    std::fs::copy(&first, &second).unwrap();
    forkprof_tests::build_wait32(&wait32).unwrap();
    let mut groups = forkprof_tests::Groups::new("ia32dt");
    let script = format!(
        "{} && sleep 1.5 && {} {}; :",
        first.display(),
        wait32.display(),
        second.display()
    );
    let linger = [("FORKPROF_TEST_IA32_LINGER_MS", "200")];
    record_group_running(&mut groups, &db, &[], &linger, &script);
    let (code, rep, err) = report_json(&db, &["--processes"]);
    assert_eq!(code, 0, "{err}");
    let exec = rep["sources"]["exec"].as_str().unwrap_or_default();
    assert!(
        exec.contains(
            "tp_btf sys_enter + tp_btf sys_exit, attached when the first was seen and detached \
             once none was left for 200 ms (attached 2 times, detached"
        ),
        "exec from {exec:?}"
    );
    check_two_spawners(&rep, &first, &second);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hangup (the terminal closed) ends a recording as Ctrl-C does: exit 0, the recording
/// finished (it used to die of SIGHUP, exit 129, its log not folded in and its end not
/// written). Under `nohup` (SIGHUP ignored from the start) it goes on.
#[test]
fn a_hangup_ends_a_recording_cleanly_unless_ignored() {
    needs_root!();
    let dir = tempdir();
    for nohup in [false, true] {
        let db = dir.join(format!("hup-{nohup}.db"));
        let mut cmd = if nohup {
            let mut c = Command::new("nohup");
            c.arg(forkprof());
            c
        } else {
            Command::new(forkprof())
        };
        let mut rec = cmd
            .args(["record", "-o"])
            .arg(&db)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until_recording(&mut rec);
        // SAFETY: plain syscall.
        unsafe { libc::kill(rec.id() as i32, libc::SIGHUP) };
        if nohup {
            std::thread::sleep(Duration::from_millis(500));
            assert!(rec.try_wait().unwrap().is_none(), "nohup: still recording");
            // SAFETY: plain syscall.
            unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
        }
        assert_eq!(rec.wait().unwrap().code(), Some(0), "nohup {nohup}");
        let (code, rep, err) = report_json(&db, &[]);
        assert_eq!(code, 0, "{err}");
        assert!(rep["unfinished"].is_null(), "nohup {nohup}: finished");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn record_p_follows_one_tree_only() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("tree.db");
    let (bin, script) = outsider(&dir, 30);
    // The traced tree: a shell that waits for a go file, then runs the probe 30 times.
    let go = dir.join("go");
    let traced_script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; for i in $(seq 30); do {}; done",
        go.display(),
        bin.display()
    );
    let mut tree = Command::new("sh")
        .args(["-c", &traced_script])
        .spawn()
        .unwrap();
    let mut rec = Command::new(forkprof())
        .args(["record", "-p", &tree.id().to_string(), "-o"])
        .arg(&db)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(&mut rec);
    // Outside the tree: the same binary, 30 more times.
    sh(&script);
    std::fs::write(&go, "").unwrap();
    assert!(tree.wait().unwrap().success());
    // SAFETY: plain syscall.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    let (code, rep, err) = report_json(&db, &[]);
    assert_eq!(code, 0, "{err}");
    let row = binary_row(&rep, &bin).expect("probe recorded");
    assert_eq!(row["processes"], 30, "only the traced tree's 30 runs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `record -p` of a shell that was running before tracing: the shell is labelled from /proc
/// (its exe, and its parent's), its children's parent is the shell, `report FILE` gives the
/// same labels, and the timeline draws no slice for its unseen life. All of it used to be
/// `[forkprof]`, with a process slice from the recording's start.
#[test]
fn record_p_labels_the_running_process_from_proc() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("found.db");
    let go = dir.join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; for i in 1 2 3; do /bin/true; done",
        go.display()
    );
    let mut tree = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let pid = tree.id();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let me = std::env::current_exe().unwrap();
    let mut rec = Command::new(forkprof())
        .args(["record", "-p", &pid.to_string(), "-o"])
        .arg(&db)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(&mut rec);
    std::fs::write(&go, "").unwrap();
    assert!(tree.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: plain syscall.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    let perfetto = dir.join("timeline.json");
    let (code, rep, err) = report_json(
        &db,
        &["--processes", "--perfetto", perfetto.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let procs = rep["processes"].as_array().unwrap();
    let shell = procs
        .iter()
        .find(|p| p["pid"] == pid)
        .expect("the traced shell");
    assert_eq!(shell["start_ns"], 0, "it existed before tracing");
    assert_eq!(shell["binary"], exe.to_str().unwrap(), "{shell}");
    assert_eq!(shell["parent_binary"], me.to_str().unwrap(), "{shell}");
    let children: Vec<&Value> = procs.iter().filter(|p| p["parent_pid"] == pid).collect();
    assert!(children.len() >= 3, "{procs:?}");
    for c in children {
        assert_eq!(c["parent_binary"], exe.to_str().unwrap(), "{c}");
    }
    assert_eq!(
        sqlite(&db, &format!("SELECT binary FROM found WHERE pid = {pid}")),
        exe.to_str().unwrap()
    );
    // The timeline: the shell's track has its exit, and no process slice.
    let timeline: Value = serde_json::from_slice(&std::fs::read(&perfetto).unwrap()).unwrap();
    let events = timeline["traceEvents"].as_array().unwrap();
    let track = events
        .iter()
        .find(|e| {
            e["name"] == "process_name"
                && e["args"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(&format!("[{pid}]")))
        })
        .expect("the shell's track")["pid"]
        .clone();
    let slices: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == track)
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(!slices.contains(&"process"), "{slices:?}");
    assert!(slices.contains(&"exit_teardown"), "{slices:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_keeps_committed_batches_and_leaves_nothing_loaded() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("killed.db");
    let (bin, script) = outsider(&dir, 1_000_000);
    let mut rec = record_system_wide(&db);
    wait_until_recording(&mut rec);
    let programs = forkprof_tests::programs_of(rec.id());
    let mut noise = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    rec.kill().unwrap();
    rec.wait().unwrap();
    noise.kill().unwrap();
    noise.wait().unwrap();
    forkprof_tests::wait_unloaded(&programs);
    let (code, rep, err) = report_json(&db, &[]);
    assert_eq!(code, 0, "{err}");
    let row = binary_row(&rep, &bin).expect("committed batches readable");
    assert!(row["processes"].as_u64().unwrap() > 10, "{row}");
    // docs/recording.md: after a kill the event tables answer its queries; the derived
    // tables are written only at a clean end.
    let execs = sqlite(
        &db,
        &format!(
            "SELECT count(*) FROM execs WHERE errno = 0 AND path = '{}'",
            bin.display()
        ),
    );
    assert!(execs.parse::<u64>().unwrap() > 10, "{execs}");
    assert_eq!(sqlite(&db, "SELECT count(*) FROM processes"), "0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// IRQ work interrupts taken so far on all CPUs (`/proc/interrupts`' `IWI` line, x86): a
/// ring-buffer wakeup that a program asks for raises one.
fn irq_work_interrupts() -> u64 {
    let table = std::fs::read_to_string("/proc/interrupts").unwrap();
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with("IWI:"))
        .expect("an IWI line in /proc/interrupts");
    line.split_whitespace()
        .skip(1)
        .map_while(|field| field.parse::<u64>().ok())
        .sum()
}

/// An agent that does not drain the ring buffer (stopped here; starved of CPU on a busy
/// host) is woken once per fill, not at every exit: each wakeup is an irq_work interrupt
/// taken inside the exiting process's program, about 16 µs on the VM measured
/// (docs/kernel-findings.md, "A stalled agent is woken once per fill"). Nothing is lost:
/// once the agent runs again it collects every record.
#[test]
fn a_stopped_agent_is_woken_once_per_fill_and_loses_nothing() {
    needs_root!();
    const SPAWNS: u64 = 1500;
    // `record` is woken once 256 KiB wait (`Pace::PROMPT`). Every spawn reserves at least an
    // exec record, so most of these exits find the ring past that: asking at each of them
    // would raise over a thousand interrupts.
    let past_threshold =
        SPAWNS - (256 << 10) / std::mem::size_of::<forkprof_common::ExecAttemptRecord>() as u64;
    assert!(past_threshold > SPAWNS / 2);
    let dir = tempdir();
    let db = dir.join("stopped.db");
    let bin = dir.join("fp-stopped-probe");
    std::fs::copy("/bin/true", &bin).unwrap();
    let mut rec = record_system_wide(&db);
    wait_until_recording(&mut rec);
    let agent = rec.id() as i32;
    // SAFETY: plain syscall.
    unsafe { libc::kill(agent, libc::SIGSTOP) };
    let before = irq_work_interrupts();
    // Checked once the agent runs again, so that a failure leaves no stopped agent behind.
    let spawned = spawn_probe("fork", SPAWNS, &bin);
    let raised = irq_work_interrupts() - before;
    // SAFETY: plain syscalls.
    unsafe {
        libc::kill(agent, libc::SIGCONT);
        libc::kill(agent, libc::SIGINT);
    }
    let status = rec.wait().unwrap();
    assert!(spawned.success());
    assert_eq!(status.code(), Some(0));
    assert!(
        raised < past_threshold / 10,
        "{raised} irq_work interrupts while {SPAWNS} processes exited beside a stopped agent \
         (at least {past_threshold} of them past the wakeup threshold)"
    );
    every_probe_recorded(&db, &bin, SPAWNS);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run -o db` of the workload's `exit 0`: a real recording of one process.
fn record_one_process(db: &Path) {
    let w = workload();
    let run = run_traced_with(
        &["-o", db.to_str().unwrap()],
        &[w.to_str().unwrap(), "exit", "0"],
        |_| {},
    );
    assert_eq!(run.code(), 0);
}

#[test]
fn bad_files_get_one_line_and_exit_2() {
    needs_root!();
    let dir = tempdir();
    // A real recording to damage.
    let good = dir.join("good.db");
    record_one_process(&good);
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.db", vec![], "empty file"),
        (
            "foreign.db",
            b"hello, this is not a database at all".to_vec(),
            "not an SQLite database",
        ),
        ("truncated.db", bytes[..bytes.len() / 3].to_vec(), ""),
        (
            "corrupt.db",
            {
                let mut b = bytes.clone();
                for x in b.iter_mut().skip(100).step_by(7) {
                    *x ^= 0x5a;
                }
                b
            },
            "",
        ),
    ];
    for (name, content, want) in cases {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        let (code, _, err) = report_json(&path, &[]);
        assert_eq!(code, 2, "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(
            err.contains(path.to_str().unwrap()) && err.contains(want),
            "{name}: {err}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    // Another program's SQLite database, and one from a newer forkprof.
    let other = dir.join("other.db");
    sqlite(&other, "CREATE TABLE t (x); INSERT INTO t VALUES (1);");
    let (code, _, err) = report_json(&other, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no meta table"), "{err}");
    let newer = dir.join("newer.db");
    std::fs::copy(&good, &newer).unwrap();
    sqlite(
        &newer,
        "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
    );
    let (code, _, err) = report_json(&newer, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("schema version 99"), "{err}");
    // A meta whose end comes before its start, and no wall time: the records' span stands
    // in, not an end less a start wrapped round to 584 years.
    let backwards = dir.join("backwards.db");
    std::fs::copy(&good, &backwards).unwrap();
    sqlite(
        &backwards,
        "DELETE FROM meta WHERE key = 'wall_ns'; \
         UPDATE meta SET value = '1000' WHERE key = 'ended_ns'; \
         UPDATE meta SET value = '2000' WHERE key = 'started_ns'",
    );
    let (code, rep, err) = report_json(&backwards, &[]);
    assert_eq!(code, 0, "{err}");
    let wall = rep["wall_ns"].as_u64().unwrap();
    assert!(wall < 60_000_000_000, "a wall time of {wall} ns");
    // A bound past u64's nanoseconds is past every record, not wrapped to the start.
    let (code, rep, err) = report_json(&good, &["--to", "18446744074s"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rep["summary"]["processes"], 1, "{rep}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flamegraph_folded_and_perfetto_outputs() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("f.db");
    let w = workload();
    let run = run_traced_with(
        &["-o", db.to_str().unwrap()],
        &[
            "sh",
            "-c",
            // `:` last, so that the shell stays `sh` (bash would exec the workload in its place).
            &format!("{} spawn fork 5 /bin/true; :", w.display()),
        ],
        |_| {},
    );
    assert_eq!(run.code(), 0);
    let svg = dir.join("f.svg");
    let folded = dir.join("f.folded");
    let trace = dir.join("f.json");
    let out = Command::new(forkprof())
        .arg("report")
        .arg(&db)
        .arg("--flamegraph")
        .arg(&svg)
        .arg("--folded")
        .arg(&folded)
        .arg("--perfetto")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folded = std::fs::read_to_string(&folded).unwrap();
    let line = folded
        .lines()
        .find(|l| l.starts_with("sh;fp-workload;true "))
        .unwrap_or_else(|| panic!("no sh;fp-workload;true stack in\n{folded}"));
    assert!(line.rsplit(' ').next().unwrap().parse::<u64>().unwrap() > 0);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.contains("fp-workload"),
        "not a flame graph"
    );
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let count = |ph: &str, name: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && (name.is_empty() || e["name"] == name))
            .count()
    };
    // sh, the workload, 5 children: one track (process_name) each.
    assert_eq!(count("M", "process_name"), 7);
    assert_eq!(count("X", "process"), 7);
    assert_eq!(
        count("X", "fork"),
        6,
        "sh forks the workload, the workload forks 5"
    );
    assert_eq!(count("s", ""), 6);
    assert_eq!(count("f", ""), 6);
    assert_eq!(count("X", "exec"), 7);
    assert_eq!(count("X", "ld_map"), 7);
    for e in events.iter().filter(|e| e["ph"] == "X") {
        assert!(
            e["dur"].as_f64().unwrap() >= 0.0 && e["ts"].as_f64().unwrap() >= 0.0,
            "{e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recording made with schema 1 (before `lds.static_start_ns`) still reads: a static
/// binary's `static_start` is then not measured, never 0, and the rest is unchanged.
#[test]
fn a_schema_1_recording_still_reads() {
    needs_root!();
    let dir = tempdir();
    let bin = dir.join("static_true");
    let src = dir.join("static_true.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    forkprof_tests::gcc(
        &dir,
        &[
            "-O2",
            "-static",
            "-o",
            bin.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
    );
    let v2 = dir.join("v2.db");
    let run = run_traced_with(
        &["-o", v2.to_str().unwrap()],
        &["sh", "-c", &format!("{0}; {0}; {0}", bin.display())],
        |_| {},
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    // sh has an interpreter, so static_start does not apply to it and is not counted; the
    // three static runs' are measured.
    let stat = |json: &Value, key: &str| json["phases"]["static_start"][key].as_u64().unwrap_or(0);
    let (code, json2, err) = report_json(&v2, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stat(&json2, "count"), 3, "{}", json2["phases"]);
    assert!(stat(&json2, "p50") > 0, "{}", json2["phases"]);
    let v1 = dir.join("v1.db");
    std::fs::copy(&v2, &v1).unwrap();
    sqlite(
        &v1,
        "ALTER TABLE lds DROP COLUMN static_start_ns; \
         UPDATE meta SET value = '1' WHERE key = 'schema_version'",
    );
    let (code, json1, err) = report_json(&v1, &[]);
    assert_eq!(code, 0, "{err}");
    // Schema 1 has no static_start at all: not measured, never a 0.
    assert_eq!(stat(&json1, "count"), 0, "{}", json1["phases"]);
    for phase in ["fork", "exec", "ld_start", "exit_teardown"] {
        assert_eq!(
            json1["phases"][phase], json2["phases"][phase],
            "{phase} differs between the schema 1 and 2 readings"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An export stopped by Ctrl-C leaves no half-written Parquet file behind (which would look
/// like a result, and make the next attempt need --force), and exits 128 + SIGINT.
#[test]
fn an_interrupted_export_leaves_no_partial_file() {
    needs_root!();
    let dir = tempdir();
    let db = dir.join("big.db");
    record_one_process(&db);
    // 400,000 copies of its exec and exit under other pids: an export of about two seconds
    // on the machines of BENCHMARKS.md, time enough to be stopped part way.
    sqlite(
        &db,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400000) \
         INSERT INTO execs SELECT 1000000 + i, start_ns, ts_ns + i, 1000000 + i, path, args, \
         argc, errno, exec_ns, exec_prepare_ns, exec_load_ns, atime_count, atime_ns, \
         cow_faults, child_run_ns, cow_fault_ns, cgroup_id FROM n, \
         (SELECT * FROM execs LIMIT 1); \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400000) \
         INSERT INTO exits SELECT 1000000 + i, start_ns, ts_ns + i, exit_code, notified, \
         exit_teardown_ns, cow_faults, exit_ns, comm, child_run_ns, cow_fault_ns, cgroup_id \
         FROM n, (SELECT * FROM exits LIMIT 1);",
    );
    let out = dir.join("big.parquet");
    let export = Command::new(forkprof())
        .args(["export"])
        .arg(&db)
        .arg("--parquet")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !out.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(out.exists(), "the export never created its file");
    // The handler is set just after the file is created.
    std::thread::sleep(Duration::from_millis(150));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(export.id() as i32, libc::SIGINT) };
    let status = export.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&status.stderr);
    assert_ne!(
        status.status.code(),
        Some(0),
        "the export finished before it was stopped: make the recording larger. {err}"
    );
    assert_eq!(status.status.code(), Some(130), "{err}");
    assert!(!out.exists(), "a partial export was left behind: {err}");
    assert!(err.contains("removed, incomplete"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
