//! forkprof under stress, faults and hostile input: it fails safe, says why, and leaves the
//! kernel clean.
use std::process::{Command, Stdio};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use forkprof_tests::{
    Killed, forkprof, forkprof_programs, free_port, monitor, needs_root, open_window_counters,
    programs_of, run_traced, run_traced_with, scrape, tempdir, wait_for, wait_unloaded_since,
    wait_until_ready, window_counters_map, workload,
};

/// The tests that check that no forkprof program is left loaded take this exclusively:
/// every other test here may have an instance of its own loaded meanwhile, and shares it.
static KERNEL: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    KERNEL.read().unwrap_or_else(PoisonError::into_inner)
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    KERNEL.write().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn bad_command_lines_exit_2_with_a_clap_message() {
    let _kernel = shared();
    for args in [
        vec!["run", "--bogus", "--", "true"],
        vec!["record", "--duration", "5x", "-o", "/tmp/fp-x.db"],
        vec!["run", "--report", "/nonexistent/dir/r.json", "--", "true"],
        vec!["record", "-o", "/nonexistent/dir/r.db"],
        vec!["report"],
        vec!["top", "--interval", "soon"],
    ] {
        let out = Command::new(forkprof()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_panic_in_the_agent_is_one_line_and_leaves_nothing_loaded() {
    let _kernel = exclusive();
    needs_root!();
    let w = workload();
    let before = forkprof_programs();
    let out = Command::new(forkprof())
        .args(["run", "--"])
        .arg(&w)
        .args(["spawn", "fork", "200", "/bin/true"])
        .env("FORKPROF_TEST_PANIC_AFTER", "5")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(70));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("internal error") && err.contains("FORKPROF_TEST_PANIC_AFTER"),
        "{err}"
    );
    wait_unloaded_since(&before);
}

/// The fields of `/proc/PID/stat` after the command name (state first), if process `pid`
/// exists and has not exited (a zombie has).
fn live_stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold any byte.
    let rest: Vec<String> = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .map(str::to_string)
        .collect();
    match rest.first().map(String::as_str) {
        Some("Z" | "X") | None => None,
        Some(_) => Some(rest),
    }
}

/// Whether process `pid` exists and has not exited (a zombie has).
fn running(pid: i32) -> bool {
    u32::try_from(pid).is_ok_and(|pid| live_stat(pid).is_some())
}

/// SIGKILLs process `pid` when dropped, so that a failed test leaves nothing running.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

#[test]
fn sigkill_of_run_leaves_the_command_running_and_the_kernel_clean() {
    let _kernel = exclusive();
    needs_root!();
    let before = forkprof_programs();
    // Far longer than the test can take (wait_unloaded_since alone may wait 10 s): it must
    // still be running at the end, and is killed then.
    let mut fp = Command::new(forkprof())
        .args(["run", "--", "sleep", "600"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sleeper: i32 = forkprof_tests::wait_for_child(fp.id(), "sleep")
        .parse()
        .unwrap();
    let _sleeper = KillOnDrop(sleeper);
    // `run` has attached its programs before it starts the command.
    assert!(!programs_of(fp.id()).is_empty(), "run holds no programs");
    fp.kill().unwrap();
    fp.wait().unwrap();
    assert!(
        running(sleeper),
        "the traced command must survive forkprof's SIGKILL"
    );
    wait_unloaded_since(&before);
    assert!(
        running(sleeper),
        "the traced command must survive forkprof's programs being unloaded"
    );
}

#[test]
fn two_instances_do_not_disturb_each_other() {
    let _kernel = shared();
    needs_root!();
    let w = workload();
    let w2 = w.clone();
    let a = std::thread::spawn(move || {
        run_traced(
            &[w.to_str().unwrap(), "spawn", "fork", "30", "/bin/true"],
            |_| {},
        )
    });
    let b = std::thread::spawn(move || {
        run_traced(
            &[w2.to_str().unwrap(), "spawn", "vfork", "40", "/bin/true"],
            |_| {},
        )
    });
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert_eq!((a.code(), b.code()), (0, 0));
    assert_eq!(
        (a.method("fork"), a.method("vfork"), a.summary("processes")),
        (30, 0, 31)
    );
    assert_eq!(
        (b.method("fork"), b.method("vfork"), b.summary("processes")),
        (0, 40, 41)
    );
}

#[test]
fn processes_in_another_pid_namespace_keep_their_lineage() {
    let _kernel = shared();
    needs_root!();
    let w = workload();
    let run = run_traced(
        &["unshare", "-fp", w.to_str().unwrap(), "spawn", "fork", "10"],
        |_| {},
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    // unshare, its child (pid 1 inside, the workload), the workload's 10 children.
    assert_eq!(run.summary("processes"), 12, "{}", run.report["summary"]);
    let procs = run.report["processes"].as_array().unwrap();
    let workload_pid = procs
        .iter()
        .find(|p| p["binary"].as_str().unwrap().ends_with("fp-workload") && p["method"] == "fork")
        .map(|p| p["pid"].as_u64().unwrap())
        .expect("the workload");
    assert_ne!(workload_pid, 1, "pids are the initial namespace's");
    let children = procs
        .iter()
        .filter(|p| p["parent_pid"].as_u64() == Some(workload_pid))
        .count();
    assert_eq!(children, 10);
}

#[test]
fn hostile_names_and_arguments_are_escaped_everywhere() {
    let _kernel = shared();
    needs_root!();
    let dir = tempdir();
    let name = std::ffi::OsStr::from_bytes(b"fp-odd\nname-\xff");
    let odd = dir.join(name);
    std::fs::copy("/bin/true", &odd).unwrap();
    let doomed = dir.join("fp-doomed");
    std::fs::copy("/bin/sleep", &doomed).unwrap();
    let long = "x".repeat(4096);
    // fp-doomed is removed while it runs: once its exec is done (its /proc exe names it, for
    // up to 20 s), then it runs 0.2 s more and is stopped.
    let script = format!(
        "\"$1\" 'line1\nline2' {long}; \"$2\" 60 & p=$!; i=0
        until case $(readlink /proc/$p/exe) in */fp-doomed) true;; *) false;; esac; do
            i=$((i + 1)); [ $i -le 2000 ] || exit 9; sleep 0.01
        done
        rm \"$2\"; sleep 0.2; kill $p; wait"
    );
    let db = dir.join("odd.db");
    let run = run_traced_with(
        &["-o", db.to_str().unwrap()],
        &["sh", "-c", &script, "sh"],
        |c| {
            c.arg(&odd).arg(&doomed);
        },
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let odd_escaped = format!("{}/fp-odd\\nname-\\xff", dir.display());
    let procs = run.report["processes"].as_array().unwrap();
    let p = procs
        .iter()
        .find(|p| p["binary"] == odd_escaped.as_str())
        .unwrap_or_else(|| panic!("no {odd_escaped} in {}", run.report["processes"]));
    let exec = &p["execs"][0];
    assert_eq!(exec["args"][1], "line1\\nline2");
    assert_eq!(exec["argc"], 3);
    assert_eq!(
        exec["args"][2].as_str().unwrap().len(),
        63,
        "arguments are bounded"
    );
    assert!(
        procs
            .iter()
            .any(|p| p["binary"].as_str().unwrap().ends_with("fp-doomed"))
    );
    // The same escaping in the table, in CSV and in a report from the recording.
    for format in ["table", "csv", "json"] {
        let out = Command::new(forkprof())
            .arg("report")
            .arg(&db)
            .args(["--format", format, "--top", "100"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).expect("output is UTF-8");
        let shown = if format == "json" {
            // JSON escapes the backslashes once more.
            "fp-odd\\\\nname-\\\\xff"
        } else {
            "fp-odd\\nname-\\xff"
        };
        assert!(text.contains(shown), "{format}:\n{text}");
        assert!(
            !text.contains("fp-odd\n"),
            "{format}: a raw newline broke a line"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

use std::os::unix::ffi::OsStrExt as _;

#[test]
fn a_full_disk_stops_the_recording_not_the_report() {
    let _kernel = shared();
    needs_root!();
    let dir = tempdir();
    let mnt = dir.join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=160k", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let db = mnt.join("full.db");
    let w = workload();
    let out = Command::new(forkprof())
        .args(["run", "--json", "-o"])
        .arg(&db)
        .arg("--")
        .arg(&w)
        .args(["spawn", "fork", "3000", "/bin/true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let _ = Command::new("umount").arg(&mnt).status();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("recording to") && err.contains("stopped"),
        "{err}"
    );
    assert!(err.contains("full"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The cause is said once, when the writing stopped; the end says what it means.
    assert_eq!(err.matches("database or disk is full").count(), 1, "{err}");
    assert!(err.contains("is incomplete: its writing stopped"), "{err}");
    // And how much the file lacks: a count, not nothing.
    let lacking = err
        .split("and ")
        .filter_map(|s| s.strip_suffix(" records did not reach it\n"))
        .filter_map(|n| n.parse::<u64>().ok())
        .next();
    assert!(lacking.is_some_and(|n| n > 0), "{err}");
    // The report still came out, complete.
    let json_start = err.find('{').expect("the JSON report on stderr");
    let report: serde_json::Value = serde_json::Deserializer::from_str(&err[json_start..])
        .into_iter::<serde_json::Value>()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(report["methods"]["fork"], 3000);
}

/// The eBPF object that forkprof's build script made (`target/<profile>/build/forkprof-<hash>/
/// out/forkprof`, the OUT_DIR of forkprof's build script, where aya-build leaves it for
/// `include_bytes_aligned!`). There is one such directory per build configuration; the newest
/// object is the one the last build embedded.
fn built_ebpf_object() -> std::path::PathBuf {
    let build = forkprof_tests::target_dir().join("build");
    let mut newest: Option<(std::time::SystemTime, std::path::PathBuf)> = None;
    for entry in std::fs::read_dir(&build).unwrap_or_else(|e| panic!("{}: {e}", build.display())) {
        let dir = entry.unwrap().path();
        // forkprof-<hash>, not forkprof-ebpf-<hash> or forkprof-common-<hash>.
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(hash) = name.strip_prefix("forkprof-") else {
            continue;
        };
        if !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let object = dir.join("out/forkprof");
        if let Ok(modified) = std::fs::metadata(&object).and_then(|m| m.modified())
            && newest.as_ref().is_none_or(|(t, _)| modified > *t)
        {
            newest = Some((modified, object));
        }
    }
    let (_, object) = newest.unwrap_or_else(|| {
        panic!(
            "no eBPF object in {}/forkprof-*/out: build forkprof first",
            build.display()
        )
    });
    object
}

/// `built_ebpf_object`'s path and bytes, which must not be empty.
fn read_built_ebpf_object() -> (std::path::PathBuf, Vec<u8>) {
    let path = built_ebpf_object();
    let object = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        !object.is_empty(),
        "{} is empty: forkprof was built with AYA_BUILD_SKIP=1",
        path.display()
    );
    (path, object)
}

/// The helper ids of every helper call in the object's executable sections: a BPF
/// instruction is 8 bytes (code, dst_reg:4 | src_reg:4, off:16, imm:32, little-endian for
/// bpfel); a call (BPF_JMP | BPF_CALL, 0x85) with src_reg 0 calls helper `imm` (src_reg 1 is
/// a call of a BPF function, 2 of a kfunc). `lddw` (0x18) takes two slots.
fn helper_calls(object: &[u8]) -> Vec<u32> {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(object).expect("the eBPF object is an ELF file");
    assert_eq!(file.architecture(), object::Architecture::Bpf);
    assert!(file.is_little_endian(), "bpfel");
    let mut calls = Vec::new();
    for section in file.sections() {
        let object::SectionFlags::Elf { sh_flags } = section.flags() else {
            unreachable!("an ELF section")
        };
        if sh_flags & u64::from(object::elf::SHF_EXECINSTR) == 0 {
            continue;
        }
        let code = section.data().unwrap();
        let name = section.name().unwrap_or("?");
        assert_eq!(code.len() % 8, 0, "{name}: not whole instructions");
        let mut insns = code.chunks_exact(8);
        while let Some(insn) = insns.next() {
            match insn[0] {
                0x85 if insn[1] >> 4 == 0 => {
                    calls.push(u32::from_le_bytes(insn[4..8].try_into().unwrap()));
                }
                0x18 => {
                    insns.next();
                }
                _ => {}
            }
        }
    }
    calls
}

/// The programs never write user memory, send signals or change a function's return value.
/// Checked on the built object, not the sources, so that no macro or dependency can hide a
/// call. Helper ids from the kernel's include/uapi/linux/bpf.h (`__BPF_FUNC_MAPPER`).
#[test]
fn the_kernel_programs_only_read() {
    let _kernel = shared();
    const KTIME_GET_NS: u32 = 5;
    const FORBIDDEN: [(u32, &str); 4] = [
        (36, "bpf_probe_write_user"),
        (58, "bpf_override_return"),
        (109, "bpf_send_signal"),
        (117, "bpf_send_signal_thread"),
    ];
    let (path, object) = read_built_ebpf_object();
    let calls = helper_calls(&object);
    let mut ids = std::collections::BTreeMap::<u32, usize>::new();
    for &id in &calls {
        *ids.entry(id).or_default() += 1;
    }
    eprintln!(
        "{}: {} helper calls, by helper id: {ids:?}",
        path.display(),
        calls.len()
    );
    assert!(
        calls.len() > 20,
        "only {} helper calls found in {}: the scan is broken",
        calls.len(),
        path.display()
    );
    assert!(
        ids.contains_key(&KTIME_GET_NS),
        "bpf_ktime_get_ns never called in {}: the scan is broken",
        path.display()
    );
    for (id, helper) in FORBIDDEN {
        assert!(
            !ids.contains_key(&id),
            "{} calls {helper} ({} times)",
            path.display(),
            ids[&id]
        );
    }
}

/// No program calls LLVM's BPF `memset`, `memcpy`, `memmove`, `memcmp` or `bcmp`. Each is a
/// byte loop (five instructions a byte for `memset`) behind a BPF function call, which LLVM
/// emits for a run of zero stores to neighbouring fields or a large copy: one on every exec
/// went unseen for weeks. Write such fields one at a time, volatile where LLVM would merge
/// them (docs/kernel-findings.md, "No byte loops"). Read from the object's relocations.
#[test]
fn the_kernel_programs_call_no_byte_loops() {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
    const BYTE_LOOPS: [&str; 5] = ["memset", "memcpy", "memmove", "memcmp", "bcmp"];
    let (path, data) = read_built_ebpf_object();
    let file = object::File::parse(&*data).expect("the eBPF object is an ELF file");
    let (mut ring_buffer_uses, mut calls) = (0, Vec::new());
    for section in file.sections() {
        for (offset, relocation) in section.relocations() {
            let object::RelocationTarget::Symbol(index) = relocation.target() else {
                continue;
            };
            let name = file
                .symbol_by_index(index)
                .ok()
                .and_then(|s| s.name().ok())
                .unwrap_or_default();
            if name == "EVENTS" {
                ring_buffer_uses += 1;
            }
            if BYTE_LOOPS.contains(&name) {
                let section = section.name().unwrap_or("?");
                calls.push(format!("{section}+{offset:#x}: {name}"));
            }
        }
    }
    assert!(
        ring_buffer_uses > 3,
        "{ring_buffer_uses} uses of the ring buffer `EVENTS` among {}'s relocations: the scan is broken",
        path.display()
    );
    assert!(
        calls.is_empty(),
        "{} calls a byte loop {} times:\n{}",
        path.display(),
        calls.len(),
        calls.join("\n")
    );
}

/// The storm's width: two threads per CPU of the test VM (2 vCPUs). Fixed, not scaled with
/// the host: on a host of 64 CPUs, 128 spawning threads may spawn faster than one agent
/// collects, and the lazy storm's test asks that nothing at all is lost.
const STORM_THREADS: usize = 4;

/// `forkprof run FLAGS` over the workload's storm of `secs` seconds with `STORM_THREADS`
/// threads: the run, how many processes the workload says it created, and its threads.
fn storm(flags: &[&str], secs: u32) -> (forkprof_tests::Run, u64, usize) {
    let w = workload();
    let threads = STORM_THREADS;
    let run = run_traced_with(
        flags,
        &[
            w.to_str().unwrap(),
            "storm",
            &secs.to_string(),
            &threads.to_string(),
        ],
        |_| {},
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let own: serde_json::Value = serde_json::from_str(run.stdout().trim()).unwrap();
    let created = own["processes"].as_u64().unwrap();
    (run, created, threads)
}

#[test]
fn spawn_storm_reconciles_with_the_workloads_own_count() {
    let _kernel = shared();
    needs_root!();
    // Recorded too: the writer thread must keep up as well.
    let dir = tempdir();
    let db = dir.join("storm.db");
    let (run, created, threads) = storm(&["-o", db.to_str().unwrap()], 30);
    let lost = run.summary("lost_events");
    let seen = run.summary("processes") - 1; // the workload itself
    eprintln!(
        "storm: {created} processes in 30 s ({:.0}/s) with {threads} threads; forkprof saw {seen}, lost {lost}",
        created as f64 / 30.0
    );
    assert_eq!(run.summary("threads"), threads as u64);
    if lost == 0 {
        assert_eq!(seen, created);
        assert_eq!(run.method("fork"), created);
    } else {
        assert!(
            seen <= created && seen + lost >= created,
            "seen {seen} + lost {lost} vs {created}"
        );
    }
    let recorded: u64 =
        forkprof_tests::sqlite(&db, "SELECT count(*) FROM spawns WHERE method = 'fork'")
            .parse()
            .unwrap();
    assert_eq!(
        recorded,
        run.method("fork"),
        "the recording holds every spawn reported"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plain `run` collects lazily (every second, or once 4 MiB wait): a storm must still
/// lose nothing, the 12 MiB left in the ring buffer past the wakeup being about 7,000
/// spawns.
#[test]
fn a_lazy_run_keeps_up_with_a_spawn_storm() {
    let _kernel = shared();
    needs_root!();
    let (run, created, threads) = storm(&[], 10);
    eprintln!(
        "lazy storm: {created} processes in 10 s ({:.0}/s) with {threads} threads",
        created as f64 / 10.0
    );
    assert_eq!(run.summary("lost_events"), 0);
    assert_eq!(run.summary("processes") - 1, created);
    assert_eq!(run.method("fork"), created);
}

#[test]
fn sigkill_of_monitor_and_record_leaves_the_kernel_clean() {
    let _kernel = exclusive();
    needs_root!();
    let before = forkprof_programs();
    let dir = tempdir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let db = dir.join("k.db");
    for args in [
        vec![
            "monitor".to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ],
        vec!["record".to_string(), "-o".into(), db.display().to_string()],
    ] {
        let mut fp = Command::new(forkprof())
            .args(&args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ready = if args[0] == "monitor" {
            "forkprof: serving metrics"
        } else {
            "forkprof: recording"
        };
        wait_until_ready(&mut fp, ready);
        assert!(
            !programs_of(fp.id()).is_empty(),
            "{args:?} holds no programs"
        );
        std::thread::sleep(Duration::from_millis(300));
        fp.kill().unwrap();
        fp.wait().unwrap();
        wait_unloaded_since(&before);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn record_p_of_a_process_that_is_gone_says_so() {
    let _kernel = shared();
    // Bad input: refused (exit 2) before anything is loaded, so no root is needed.
    let dir = tempdir();
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let out = Command::new(forkprof())
        .args(["record", "-p", &pid.to_string(), "-o"])
        .arg(dir.join("gone.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("-p {pid}")), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reused_pid_is_two_processes_with_their_own_execs() {
    let _kernel = shared();
    needs_root!();
    let w = workload();
    let run = run_traced(&[w.to_str().unwrap(), "reuse"], |_| {});
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let own: serde_json::Value = serde_json::from_str(run.stdout().trim()).unwrap();
    let pid = own["pid"].as_u64().unwrap();
    let procs = run.report["processes"].as_array().unwrap();
    let same: Vec<&serde_json::Value> = procs
        .iter()
        .filter(|p| p["pid"].as_u64() == Some(pid))
        .collect();
    assert_eq!(same.len(), 2, "two processes had pid {pid}: {same:?}");
    assert_ne!(same[0]["start_ns"], same[1]["start_ns"]);
    let mut binaries: Vec<&str> = same.iter().map(|p| p["binary"].as_str().unwrap()).collect();
    binaries.sort();
    assert_eq!(binaries, ["/bin/false", "/bin/true"]);
    for p in same {
        assert_eq!(p["execs"].as_array().unwrap().len(), 1, "{p}");
        assert!(p["exit"].is_object(), "{p}");
    }
}

/// What forkprof writes is not group- or world-writable, and its temporary files are gone
/// when it exits. It makes them in `std::env::temp_dir()`, so the test gives it a private
/// TMPDIR, which must be empty afterwards: the host's own /tmp, where other programs (and
/// other forkprofs) come and go, is not looked at.
#[test]
fn nothing_world_writable_is_left_behind() {
    let _kernel = shared();
    needs_root!();
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempdir();
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let db = dir.join("w.db");
    let out = Command::new(forkprof())
        .args(["bench", "--iterations", "20", "--rows", "fork+_exit static"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = run_traced_with(&["-o", db.to_str().unwrap()], &["true"], |c| {
        c.env("TMPDIR", &tmp);
    });
    assert_eq!(run.code(), 0);
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "forkprof left {left:?} in its TMPDIR");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.path() == tmp {
            continue;
        }
        let meta = entry.metadata().unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o022,
            0,
            "group/world-writable output"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `forkprof bench` stopped by a signal removes its working directory and exits 128 + N.
#[test]
fn bench_stopped_by_a_signal_cleans_up() {
    let _kernel = shared();
    needs_root!();
    for (signal, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let child = Command::new(forkprof())
            .args(["bench", "--rows", "fork+exec dynamic"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let dir = std::env::temp_dir().join(format!("forkprof-bench-{}", child.id()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("driver-dynamic").exists() {
            assert!(
                Instant::now() < deadline,
                "bench never made {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}

/// `run`'s report written to a pipe nobody reads any more (`2>&1 | head -1`) does not turn
/// into an error or an abort (exit 134): forkprof still exits with CMD's status.
#[test]
fn run_exits_with_the_commands_status_when_its_report_pipe_is_closed() {
    let _kernel = shared();
    needs_root!();
    let mut child = Command::new(forkprof())
        .args(["run", "--", "sh", "-c", "sleep 0.2; exit 3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end at once: the report meets a closed pipe.
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "{status:?}");
}

/// When process `pid` started (`/proc/PID/stat`'s `starttime`, in clock ticks since boot),
/// if it is alive and not a zombie.
fn start_time(pid: u32) -> Option<u64> {
    // state is the line's 3rd field, starttime its 22nd.
    live_stat(pid)?.get(19)?.parse().ok()
}

/// The open-window counters of `ACTIVE`, in `forkprof_common::active` order.
const WINDOW_COUNTERS: [&str; 8] = [
    "forks",
    "execs",
    "ld",
    "exits",
    "cow",
    "children",
    "spilled",
    "static_start",
];
const _: () = assert!(WINDOW_COUNTERS.len() == forkprof_common::active::COUNT as usize);

/// Live processes that started at `since` (clock ticks since boot) or later, other than
/// `agent`: a tick is 1-10 ms, so those of the agent's own tick count too.
fn processes_started_after(since: u64, agent: u32) -> usize {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&pid| pid != agent && start_time(pid).is_some_and(|t| t >= since))
                .count()
        })
        .unwrap_or(0)
}

/// The agent's open-window counters come back to 0 at rest: one that does not keeps its
/// gate open, and every hot hit on the system then looks its process up. Samples 20 times,
/// 50 ms apart: a window that closes reads 0 at some point; one that never closes never does.
///
/// The counters are system-wide, and a process of the host's that forked and has not exec'd
/// (a shell's subshell) rightly holds its copy-on-write window until it execs or exits. So
/// each sample allows one window of each kind for every live process that started after the
/// agent: its own window, or that of the parent it was forked from. At rest the test's own
/// processes are gone, so on a quiet host that allows none.
fn assert_windows_close(map: &str, agent: u32, when: &str) {
    let agent_start = start_time(agent).expect("the agent is running");
    let samples: Vec<(Vec<u64>, usize)> = (0..20)
        .filter_map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            let counters = open_window_counters(map)?;
            Some((counters, processes_started_after(agent_start, agent)))
        })
        .collect();
    assert!(
        !samples.is_empty(),
        "the agent's open-window counters could not be read"
    );
    for (i, name) in WINDOW_COUNTERS.iter().enumerate() {
        let least = samples
            .iter()
            .map(|(s, newer)| s[i].saturating_sub(*newer as u64))
            .min()
            .unwrap();
        assert_eq!(
            least,
            0,
            "{when}: {name} windows never all closed at rest: {samples:?} ({}; then how many \
             processes started after the agent are alive)",
            WINDOW_COUNTERS.join(", ")
        );
    }
}

/// Processes that fork and exec while the agent attaches its programs one by one must not
/// leave windows open: a program that opens a window (a fork's, an exec's) attached before
/// the one that closes it used to count windows that never closed, which kept the kernel's
/// hot gates open for the whole session. Then every kind of spawn the workload knows (fork,
/// vfork, posix_spawn, threads exec'ing at once, failing execs, a storm of threads and
/// processes, a killed process, a reused pid, a process killed while a thread, main or not,
/// waits inside vfork) must close every window it opens.
#[test]
fn windows_close_after_a_busy_start_and_every_kind_of_spawn() {
    let _kernel = exclusive();
    needs_root!();
    // Two spawners, one exec'ing straight away, one through a shell's fork and exec, busy
    // all the while the agent loads and attaches.
    let spawners: Vec<Killed> = [
        "while :; do /bin/true; done",
        "while :; do sh -c 'ls / >/dev/null'; done",
    ]
    .iter()
    .map(|script| Killed(Command::new("sh").args(["-c", script]).spawn().unwrap()))
    .collect();
    let port = free_port();
    let agent = monitor(port, &[]);
    wait_for("monitor's /metrics", forkprof_tests::READY, || scrape(port));
    let map = window_counters_map(agent.0.id()).expect("the agent's .bss map");
    let agent_pid = agent.0.id();
    std::thread::sleep(Duration::from_millis(500));
    drop(spawners);
    // The spawners' last children finish.
    std::thread::sleep(Duration::from_millis(300));
    assert_windows_close(&map, agent_pid, "after a busy start");
    let w = workload();
    let w = w.to_str().unwrap();
    for args in [
        &[w, "mix", "20", "/bin/true"][..],
        &[w, "exec-threads", "50", "/bin/true"],
        &[w, "storm", "10", "4"],
        &[w, "cow", "100"],
        &[w, "reuse"],
        &[w, "kill", "9"],
        &[w, "vfork-killed"],
    ] {
        let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(
            out.status.success() || args[1] == "kill",
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_windows_close(&map, agent_pid, "after the workloads");
}

/// Waits, until `deadline`, for a line on FIFO `fifo`, opened for reading without blocking
/// (`reader`): `sh`'s `echo > FIFO` says the traced shell got there. Panics with `what`
/// when `agent` exits first or the deadline passes.
fn await_line(reader: &mut std::fs::File, agent: &mut std::process::Child, what: &str) {
    use std::io::Read as _;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut byte = [0u8; 1];
    loop {
        match reader.read(&mut byte) {
            Ok(1) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{what}: reading the fifo: {e}"),
        }
        if let Some(status) = agent.try_wait().unwrap() {
            panic!("{what}: forkprof run exited first ({status})");
        }
        assert!(Instant::now() < deadline, "{what}: not reached in 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes a line to FIFO `fifo` if a reader has it open now; ENXIO if none does. Opened
/// without blocking, so that a reader that died is an error, not a hang.
fn try_release(fifo: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)?
        .write_all(b"\n")
}

/// Lets the traced shell's `read x < FIFO` go on, once the shell has `fifo` open for reading.
fn release(fifo: &std::path::Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match try_release(fifo) {
            Ok(()) => return,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
            Err(e) => panic!("{what}: writing to the fifo: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the shell never read the fifo"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `forkprof run` of a shell that waits on FIFO `go`: dropped on a failed assertion, it
/// lets the shell go on (twice, for both its waits) and kills the agent, so that nothing is
/// left waiting.
struct BlockedShell {
    agent: std::process::Child,
    go: std::path::PathBuf,
}

impl Drop for BlockedShell {
    fn drop(&mut self) {
        for _ in 0..2 {
            let _ = try_release(&self.go);
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.agent.kill();
        let _ = self.agent.wait();
    }
}

/// A process whose exit the kernel never saw leaves its state behind, holding the windows
/// it had open. When a fork reuses its pid, that state is forgotten: each window it held must
/// close with it, or its gate stays open for the whole session and every hot hit on the
/// system pays a lookup; and its exit is counted as lost (`lost.exit_unseen`). A missed exit
/// cannot be made on demand, so the test plants what one leaves into the agent's own
/// `PROC_SLOTS`: an entry of a pid just freed, in its copy-on-write window, before its first
/// return from the fork, in an exec attempt, with its dynamic-linker window open and a fork
/// in flight, each window counted in `ACTIVE` as the kernel counts them. The traced shell is
/// blocked meanwhile, so nothing else changes the counts. Then it forks onto that pid.
#[test]
fn a_stale_entry_closes_the_windows_it_held_and_its_exit_is_counted_lost() {
    use forkprof_common::ProcKey;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _kernel = exclusive();
    needs_root!();
    let dir = tempdir();
    let (ready, go, got) = (dir.join("ready"), dir.join("go"), dir.join("got"));
    for fifo in [&ready, &go] {
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }
    // A pid just freed: new pids are given above it until they wrap, so nothing takes it.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let script = format!(
        "echo > {ready}; read x < {go}; {w} fork-onto {pid} > {got}; echo > {ready}; read x < {go}",
        ready = ready.display(),
        go = go.display(),
        got = got.display(),
        w = workload().display(),
    );
    let report = dir.join("report.json");
    let agent = Command::new(forkprof())
        .args(["run", "--json", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", &script])
        // As root: only root may set the next pid.
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .env_remove("SUDO_USER")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut shell = BlockedShell {
        agent,
        go: go.clone(),
    };
    let agent = &mut shell.agent;
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&ready)
        .unwrap();
    await_line(&mut reader, agent, "the shell's start");

    let planted = plant_stale_entry(
        agent.id(),
        ProcKey {
            start_ns: 1,
            pid,
            mid_life: 0,
        },
    );

    release(&go, "the fork onto the pid");
    await_line(&mut reader, agent, "the fork onto the pid");
    let said = std::fs::read_to_string(&got).unwrap();
    assert_eq!(
        said.trim(),
        format!("{{\"pid\":{pid}}}"),
        "another process took pid {pid} first: the test could not reuse it"
    );
    planted.assert_retired();

    release(&go, "the shell's end");
    assert!(agent.wait().unwrap().success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(
        report["summary"]["lost"]["exit_unseen"], 1,
        "{}",
        report["summary"]["lost"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stale entry planted into an agent's `PROC_SLOTS` by `plant_stale_entry`, and the window
/// counters before it.
struct Planted {
    slots: String,
    bss: String,
    index: u32,
    before: Vec<u64>,
}

/// Plants into the `PROC_SLOTS` of the agent `agent` the entry that a process whose exit was
/// never seen leaves, keyed `key`, under `key.pid` (a pid just freed, whose slot must be
/// free): in its copy-on-write window, before its first return from the fork, in an exec
/// attempt, with its dynamic-linker window open and a fork in flight, each window counted
/// in `ACTIVE` as the kernel counts them.
fn plant_stale_entry(agent: u32, key: forkprof_common::ProcKey) -> Planted {
    use forkprof_common::{
        ForkState, PROC_SLOT_COUNT, ProcKey, ProcState, active, child_state, ld_state,
    };
    use std::mem::offset_of;
    let pid = key.pid;
    let slots = forkprof_tests::map_of(agent, "PROC_SLOTS").expect("the agent's PROC_SLOTS");
    let bss = window_counters_map(agent).expect("the agent's .bss map");
    let index = pid & (PROC_SLOT_COUNT - 1);
    let slot = forkprof_tests::array_value(&slots, index).expect("the pid's slot");
    assert_eq!(slot.len(), size_of::<ProcState>());
    assert!(
        slot.iter().all(|&b| b == 0),
        "the slot of pid {pid} is held: {slot:?}"
    );
    let before = open_window_counters(&bss).expect("the window counters");

    let mut entry = vec![0u8; size_of::<ProcState>()];
    let mut put = |at: usize, value: &[u8]| entry[at..at + value.len()].copy_from_slice(value);
    put(offset_of!(ProcState, owner), &u64::from(pid).to_le_bytes());
    let at_key = offset_of!(ProcState, key);
    put(
        at_key + offset_of!(ProcKey, start_ns),
        &key.start_ns.to_le_bytes(),
    );
    put(at_key + offset_of!(ProcKey, pid), &pid.to_le_bytes());
    put(
        at_key + offset_of!(ProcKey, mid_life),
        &key.mid_life.to_le_bytes(),
    );
    put(offset_of!(ProcState, in_cow_window), &1u32.to_le_bytes());
    put(
        offset_of!(ProcState, child_state),
        &child_state::AWAITING.to_le_bytes(),
    );
    put(
        offset_of!(ProcState, ld_state),
        &ld_state::START.to_le_bytes(),
    );
    put(offset_of!(ProcState, in_exec), &1u32.to_le_bytes());
    put(
        offset_of!(ProcState, fork) + offset_of!(ForkState, start_ns),
        &1u64.to_le_bytes(),
    );
    forkprof_tests::update_map(&slots, &index.to_le_bytes(), &entry);
    let held = [
        active::FORKS,
        active::EXECS,
        active::LD,
        active::COW,
        active::CHILDREN,
    ];
    let mut counters = forkprof_tests::array_value(&bss, 0).expect("the agent's .bss");
    for i in held {
        let at = i as usize * 8;
        let n = u64::from_le_bytes(counters[at..at + 8].try_into().unwrap()) + 1;
        counters[at..at + 8].copy_from_slice(&n.to_le_bytes());
    }
    forkprof_tests::update_map(&bss, &0u32.to_le_bytes(), &counters);
    Planted {
        slots,
        bss,
        index,
        before,
    }
}

impl Planted {
    /// Every window the entry held closed, and the slot is free: the process that took its
    /// pid has come and gone.
    fn assert_retired(&self) {
        let after = open_window_counters(&self.bss).expect("the window counters");
        let before = &self.before;
        for (i, name) in WINDOW_COUNTERS.iter().enumerate() {
            assert_eq!(
                after[i], before[i],
                "{name}: the windows the stale entry held did not all close \
                 (before the plant {before:?}, after its pid's next process {after:?}; \
                 {WINDOW_COUNTERS:?})"
            );
        }
        assert!(
            forkprof_tests::array_value(&self.slots, self.index).is_some_and(|s| s[..8] == [0; 8]),
            "the pid's slot is still held after its process exited"
        );
    }
}

/// Under `--cgroup`, a process that comes into the scope from outside was forked where no
/// hook looks for a stale entry under its pid (task_newtask does, for a traced fork): its
/// first hook in the scope does. A stale entry first seen mid-life whose start time is not
/// the process's is a previous process's, retired then: its windows close and its exit is
/// counted lost, and the process gets an entry of its own. Planted as in
/// `a_stale_entry_closes_the_windows_it_held_and_its_exit_is_counted_lost`, first seen
/// mid-life (start 1); a child forked onto its pid outside the scope moves in and execs
/// /bin/true. Before, the process took the stale entry as its own, with its windows.
#[test]
fn a_stale_entry_first_seen_mid_life_is_retired_by_the_next_process_its_pid_brings_into_a_scope() {
    let _kernel = exclusive();
    needs_root!();
    let mut groups = forkprof_tests::Groups::new("stale");
    let a = groups.make("a.service");
    let resident = forkprof_tests::resident_in(&a);
    let dir = tempdir();
    let db = dir.join("stale.db");
    // A pid just freed: new pids are given above it until they wrap, so nothing takes it.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let rec = Command::new(forkprof())
        .args(["record", "--cgroup", &groups.shown("a.service")])
        .args(["--duration", "120s", "-o"])
        .arg(&db)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut rec = forkprof_tests::Killed(rec);
    let said = forkprof_tests::stderr_lines(&mut rec.0);
    forkprof_tests::wait_for("record to start tracing", Duration::from_secs(60), || {
        said.try_iter()
            .any(|l| l.starts_with("forkprof: recording"))
            .then_some(())
    });
    let planted = plant_stale_entry(rec.0.id(), forkprof_common::ProcKey::mid_life(pid, 1));
    let out = Command::new(workload())
        .args(["fork-onto", &pid.to_string()])
        .arg(&a)
        .output()
        .unwrap();
    forkprof_tests::succeeded(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{{\"pid\":{pid}}}"),
        "another process took pid {pid} first: the test could not reuse it"
    );
    planted.assert_retired();
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(rec.0.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(rec.0.wait().unwrap().code(), Some(0));
    drop(resident);
    assert_eq!(
        forkprof_tests::sqlite(&db, "SELECT value FROM meta WHERE key = 'lost_exit_unseen'"),
        "1"
    );
    // The process's own exec, under a key of its own: first seen mid-life, its start its own.
    let execs = forkprof_tests::sqlite(
        &db,
        &format!("SELECT start_ns < -1, path FROM execs WHERE pid = {pid}"),
    );
    assert_eq!(execs, "1|/bin/true");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Output that cannot be written (stdout on a full disk) is an error with exit 1, for the
/// generated texts too: never the panic of a bug.
#[test]
fn generated_texts_on_a_full_disk_are_an_error_not_a_bug() {
    for args in [
        &["completions", "bash"][..],
        &["man"][..],
        &["man", "run"][..],
    ] {
        let out = Command::new(forkprof())
            .args(args)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("internal error"), "{args:?}: {err}");
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
    }
}

/// Counts out of range are refused by the parser (exit 2, the range named), before anything
/// runs: `bench --iterations 0` ran nothing and said nothing, and a `--top-binaries` near
/// u64's top wrapped the sizes derived from it.
#[test]
fn counts_out_of_range_are_refused_with_their_range() {
    for (args, said) in [
        (&["bench", "--iterations", "0"][..], "must be at least 1"),
        (&["report", "x.db", "--top", "0"][..], "must be at least 1"),
        (
            &["monitor", "--top-binaries", "18446744073709551615"][..],
            "must be a number from 0 to 100000",
        ),
        (
            &["monitor", "--top-cgroups", "100001"][..],
            "must be a number from 0 to 100000",
        ),
    ] {
        let out = Command::new(forkprof()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
}

/// A recording's path that holds a FIFO, a device or a directory is refused at once with
/// exit 2, `--force` or not: an SQLite file can be none of them, and a FIFO's open would
/// wait after the programs were loaded. A regular file there needs `--force`.
#[test]
fn a_recording_path_that_is_no_regular_file_is_refused_before_loading() {
    let dir = tempdir();
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let file = dir.join("old.db");
    std::fs::write(&file, b"").unwrap();
    let fifo = fifo.to_str().unwrap();
    let d = dir.to_str().unwrap();
    let f = file.to_str().unwrap();
    for (args, said) in [
        (
            &["record", "-o", fifo, "--force"][..],
            "is not a regular file",
        ),
        (
            &["run", "-o", fifo, "--force", "--", "true"][..],
            "is not a regular file",
        ),
        (
            &["record", "-o", "/dev/null", "--force"][..],
            "is not a regular file",
        ),
        (&["record", "-o", d, "--force"][..], "is a directory"),
        (&["record", "-o", f][..], "exists; give --force"),
    ] {
        // Waited for with a deadline: a FIFO's open blocks until a reader comes.
        let mut child = Command::new(forkprof())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after 20 s (waiting on the FIFO?)");
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
