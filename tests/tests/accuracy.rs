//! Phase attribution against ground truth: small programs time themselves with
//! CLOCK_MONOTONIC (the clock bpf_ktime_get_ns reads) and forkprof's numbers must agree.
use std::path::{Path, PathBuf};
use std::process::Command;

use forkprof_tests::{Run, needs_root, run_traced, run_traced_with, tempdir, workload};
use serde_json::Value;

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// |a - b| <= max(rel * b, abs_ns)
fn assert_close(what: &str, measured: f64, truth: f64, rel: f64, abs_ns: f64) {
    let tol = (rel * truth).max(abs_ns);
    assert!(
        (measured - truth).abs() <= tol,
        "{what}: forkprof {:.1} us vs ground truth {:.1} us (tolerance {:.1} us)",
        measured / 1e3,
        truth / 1e3,
        tol / 1e3
    );
}

fn phase(p: &Value, name: &str) -> Option<f64> {
    p["phases"][name].as_u64().map(|v| v as f64)
}

fn processes_with_method<'a>(run: &'a Run, method: &str) -> Vec<&'a Value> {
    run.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["method"] == method)
        .collect()
}

fn workload_mean_call_ns(run: &Run) -> f64 {
    let line = run.stdout();
    let v: Value = serde_json::from_str(line.trim()).expect("workload JSON");
    v["mean_call_ns"].as_f64().unwrap()
}

/// The parent times each call itself, around the bare syscall: glibc's fork() and
/// posix_spawn() add work of their own around it (see the next test for fork). For
/// posix_spawn that is the mmap and munmap of the child's stack and the signal masks, 8-16 µs
/// here, and 11-25 µs unpinned, when a child that ran on the other CPU makes the munmap pay a
/// TLB shootdown. So the parent times `posix_spawn-raw`, the clone(CLONE_VM|CLONE_VFORK) at
/// the heart of posix_spawn, which forkprof counts as posix_spawn too.
#[test]
fn fork_latency_matches_the_parents_own_timing() {
    needs_root!();
    let w = workload();
    for (method, program) in [
        ("fork-raw", None),
        ("vfork", Some("/bin/true")),
        ("posix_spawn-raw", Some("/bin/true")),
    ] {
        let mut cmd = vec![w.to_str().unwrap(), "spawn", method, "200"];
        cmd.extend(program);
        let run = run_traced(&cmd, |_| {});
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let truth = workload_mean_call_ns(&run);
        let kind = method.strip_suffix("-raw").unwrap_or(method);
        let children = processes_with_method(&run, kind);
        assert_eq!(children.len(), 200);
        // The parent's call also spans vfork_wait for vfork-type methods.
        let measured = mean(
            &children
                .iter()
                .map(|p| phase(p, "fork").unwrap() + phase(p, "vfork_wait").unwrap_or(0.0))
                .collect::<Vec<_>>(),
        );
        eprintln!(
            "{method}: forkprof {:.1} us, the parent's own timing {:.1} us",
            measured / 1e3,
            truth / 1e3
        );
        assert_close(method, measured, truth, 0.10, 20_000.0);
    }
}

/// `child_run`: a fork child that spins 2 ms (on the vDSO clock) before it exits has a
/// child_run of 2 ms plus its return from fork; a vfork child that execs at once, a few µs.
#[test]
fn child_run_is_the_childs_own_time_before_exec_or_exit() {
    needs_root!();
    let w = workload();
    let run = run_traced(&[w.to_str().unwrap(), "spawn", "fork-spin", "50"], |_| {});
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let children = processes_with_method(&run, "fork");
    assert_eq!(children.len(), 50);
    let spin = mean(
        &children
            .iter()
            .map(|p| phase(p, "child_run").expect("child_run measured"))
            .collect::<Vec<_>>(),
    );
    let run = run_traced(
        &[w.to_str().unwrap(), "spawn", "vfork", "50", "/bin/true"],
        |_| {},
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let children = processes_with_method(&run, "vfork");
    assert_eq!(children.len(), 50);
    let vfork = mean(
        &children
            .iter()
            .map(|p| phase(p, "child_run").expect("child_run measured"))
            .collect::<Vec<_>>(),
    );
    eprintln!(
        "child_run: fork child spinning 2 ms {:.1} us; vfork child that execs at once {:.1} us",
        spin / 1e3,
        vfork / 1e3
    );
    assert!(spin >= 2e6, "child_run {spin} ns < the 2 ms the child spun");
    assert_close("fork-spin child_run", spin, 2e6, 0.10, 100_000.0);
    assert!(
        vfork > 0.0 && vfork < 100_000.0,
        "vfork child_run {vfork} ns"
    );
}

/// libc's fork() as the parent sees it: the syscall, glibc's wrapper (atfork handlers,
/// locks) and the copy-on-write fault of the parent's first stack write after it.
/// forkprof's `fork` is the syscall alone, so it must be below that, and the difference is
/// about one fault.
#[test]
fn libc_fork_residue_is_the_wrapper_and_one_cow_fault() {
    needs_root!();
    let w = workload();
    let run = run_traced(&[w.to_str().unwrap(), "spawn", "fork", "200"], |_| {});
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let truth = workload_mean_call_ns(&run);
    let children = processes_with_method(&run, "fork");
    let fork = mean(
        &children
            .iter()
            .map(|p| phase(p, "fork").unwrap())
            .collect::<Vec<_>>(),
    );
    let cow = mean(
        &children
            .iter()
            .map(|p| phase(p, "cow_faults").unwrap())
            .collect::<Vec<_>>(),
    );
    eprintln!(
        "libc fork(): parent {:.1} us, forkprof fork {:.1} us, residue {:.1} us, {cow:.1} COW faults per fork",
        truth / 1e3,
        fork / 1e3,
        (truth - fork) / 1e3
    );
    assert!(fork < truth, "syscall {fork} ns >= libc fork() {truth} ns");
    assert!(
        cow >= 1.0,
        "the parent's stack write after fork is a COW fault"
    );
}

#[test]
fn pagetable_copy_dominates_the_fork_of_a_1gib_parent() {
    needs_root!();
    let w = workload();
    let run = run_traced(&[w.to_str().unwrap(), "spawn", "fork", "5"], |c| {
        c.env("FP_RSS_MIB", "1024");
    });
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let truth = workload_mean_call_ns(&run);
    let children = processes_with_method(&run, "fork");
    assert_eq!(children.len(), 5);
    let fork = mean(
        &children
            .iter()
            .map(|p| phase(p, "fork").unwrap())
            .collect::<Vec<_>>(),
    );
    let pt = mean(
        &children
            .iter()
            .map(|p| phase(p, "pagetable_copy").unwrap())
            .collect::<Vec<_>>(),
    );
    assert!(
        pt >= 0.9 * fork,
        "pagetable_copy {pt} ns < 90% of fork {fork} ns"
    );
    assert_close("fork of a 1 GiB parent", fork, truth, 0.10, 0.0);
}

#[test]
fn cow_faults_match_the_pages_the_parent_wrote() {
    needs_root!();
    let w = workload();
    let pages = 3000.0;
    let run = run_traced(&[w.to_str().unwrap(), "cow", "3000"], |_| {});
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let child = processes_with_method(&run, "fork");
    assert_eq!(child.len(), 1);
    let cow = phase(child[0], "cow_faults").expect("cow_faults measured");
    assert!(
        (cow - pages).abs() <= 0.05 * pages,
        "cow_faults {cow} vs {pages} pages written"
    );
}

struct Fixtures {
    dir: PathBuf,
}

impl Fixtures {
    fn build() -> Self {
        let dir = tempdir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let gcc = |args: &[&str]| forkprof_tests::gcc(&dir, args);
        let main_c = src.join("main_time.c");
        let main_c = main_c.to_str().unwrap();
        gcc(&[
            "-O2",
            "-o",
            "exec_timer",
            src.join("exec_timer.c").to_str().unwrap(),
        ]);
        gcc(&["-O2", "-static", "-o", "main_static", main_c]);
        gcc(&["-O2", "-o", "main_dynamic", main_c]);
        gcc(&[
            "-O2",
            "-o",
            "main_libs",
            main_c,
            "-Wl,--no-as-needed",
            "-lssl",
            "-lcrypto",
            "-lz",
            "-lm",
        ]);
        Self { dir }
    }
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs exec_timer under forkprof: `n` execs of each of `binaries`, taken in turn so that the
/// machine's drift falls on all of them alike. Returns the true exec→main time of each run, per
/// binary, and forkprof's run.
fn exec_to_main(
    fx: &Fixtures,
    flags: &[&str],
    binaries: &[&str],
    n: usize,
) -> (Vec<Vec<f64>>, Run) {
    let timer = fx.dir.join("exec_timer");
    let targets: Vec<String> = binaries
        .iter()
        .map(|b| fx.dir.join(b).to_str().unwrap().to_owned())
        .collect();
    let total = n * binaries.len();
    let mut cmd = vec![timer.to_str().unwrap().to_owned(), total.to_string()];
    cmd.extend(targets);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let run = run_traced_with(flags, &cmd, |_| {});
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let out = run.stdout();
    let field = |tag: &str| -> Vec<f64> {
        out.lines()
            .filter_map(|l| l.strip_prefix(tag))
            .map(|v| v.trim().parse::<f64>().unwrap())
            .collect()
    };
    let (mains, t0s) = (field("main "), field("t0 "));
    assert_eq!((mains.len(), t0s.len()), (total, total));
    let mut truth = vec![Vec::new(); binaries.len()];
    for (i, (m, t)) in mains.iter().zip(&t0s).enumerate() {
        truth[i % binaries.len()].push(m - t);
    }
    (truth, run)
}

fn phase_means(run: &Run, binary: &str) -> (f64, [f64; 3]) {
    let procs: Vec<&Value> = run.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["binary"].as_str().unwrap().ends_with(binary))
        .collect();
    assert!(!procs.is_empty(), "no process ran {binary}");
    let m = |name: &str| {
        mean(
            &procs
                .iter()
                .map(|p| {
                    phase(p, name).unwrap_or_else(|| panic!("{name} not measured for {binary}"))
                })
                .collect::<Vec<_>>(),
        )
    };
    (m("exec"), [m("ld_start"), m("ld_map"), m("ld_reloc_init")])
}

fn static_start_mean(run: &Run, binary: &str) -> f64 {
    let starts: Vec<f64> = run.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["binary"].as_str().unwrap().ends_with(binary))
        .map(|p| phase(p, "static_start").expect("static_start measured"))
        .collect();
    mean(&starts)
}

/// The shared libraries `ldd` lists for `binary`, besides the vDSO and the dynamic linker:
/// the objects the dynamic linker opens and maps.
fn shared_libraries(fx: &Fixtures, binary: &str) -> usize {
    let out = Command::new("ldd")
        .arg(fx.dir.join(binary))
        .output()
        .unwrap();
    assert!(out.status.success(), "ldd {binary}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("=> /"))
        .count()
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The phase's value in every process that ran `binary`.
fn phase_values(run: &Run, binary: &str, name: &str) -> Vec<f64> {
    run.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["binary"].as_str().unwrap().ends_with(binary))
        .map(|p| phase(p, name).unwrap_or_else(|| panic!("{name} not measured for {binary}")))
        .collect()
}

#[test]
fn exec_and_dynamic_linker_match_exec_to_main() {
    needs_root!();
    let fx = Fixtures::build();
    let n = 40;

    // A static binary's own start-up (CPU feature probes, IRELATIVE relocations, TLS, thread
    // set-up, malloc's first brk) is static_start, up to static glibc's RELRO mprotect, its
    // last syscall before main. What it leaves out is that mprotect and the return to main: a
    // few µs whichever CPU runs it, inside 30 µs. (Ending at arch_prctl left out ~100 µs on
    // AMD hosts, where cpuid does not trap.)
    let binary = "main_static";
    let (truth, run) = exec_to_main(&fx, &[], &[binary], n);
    let (exec, ld) = phase_means(&run, binary);
    let truth = mean(&truth[0]);
    let start = static_start_mean(&run, binary);
    eprintln!(
        "{binary}: exec→main {:.1} us; exec {:.1} + static_start {:.1} us",
        truth / 1e3,
        exec / 1e3,
        start / 1e3
    );
    assert_eq!(ld, [0.0; 3], "ld_* of a static binary");
    assert!(start > 0.0, "static_start of a static binary");
    assert_close(binary, exec + start, truth, 0.10, 30_000.0);

    // The two dynamic binaries run in turn in one trace, so that the machine's drift from one
    // second to the next falls on both alike.
    let binaries = ["main_dynamic", "main_libs"];
    let (truths, run) = exec_to_main(&fx, &[], &binaries, n);
    let mut ld_map = Vec::new();
    for (binary, truth) in binaries.iter().zip(&truths) {
        let (exec, ld) = phase_means(&run, binary);
        let truth = mean(truth);
        eprintln!(
            "{binary}: exec→main {:.1} us; exec {:.1} + ld_start {:.1} + ld_map {:.1} + ld_reloc_init {:.1} us",
            truth / 1e3,
            exec / 1e3,
            ld[0] / 1e3,
            ld[1] / 1e3,
            ld[2] / 1e3
        );
        assert_close(binary, exec + ld.iter().sum::<f64>(), truth, 0.10, 30_000.0);
        // ld_map opens each library the dynamic linker loads (after ld.so.cache): exactly
        // those ldd lists.
        let group = run.report["groups"]["binary"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["binary"].as_str().unwrap().ends_with(binary))
            .unwrap_or_else(|| panic!("no group for {binary}"));
        assert_eq!(
            group["ld_objects_mean"].as_f64(),
            Some(shared_libraries(&fx, binary) as f64),
            "{binary}: objects the dynamic linker opened"
        );
        ld_map.push(median(&phase_values(&run, binary, "ld_map")));
    }
    // Each further library costs ld_map at least its openat, the read of its ELF header, the
    // mmaps of its segments (each a new VMA) and a close: some µs on any x86 host. So ld_map
    // grows by at least 2 µs per library; medians, so that one slow run cannot decide.
    let extra = shared_libraries(&fx, "main_libs") - shared_libraries(&fx, "main_dynamic");
    assert!(
        ld_map[1] - ld_map[0] >= 2_000.0 * extra as f64,
        "ld_map should grow with the {extra} further libraries: medians {ld_map:?} ns"
    );
}

/// `--precise-ld`: uprobes give the outer edges of the dynamic linker, constructors included,
/// so exec + ld_* covers exec → main even more closely.
#[test]
fn precise_ld_matches_exec_to_main() {
    needs_root!();
    let fx = Fixtures::build();
    for binary in ["main_dynamic", "main_libs"] {
        let (truth, run) = exec_to_main(&fx, &["--precise-ld"], &[binary], 30);
        assert!(
            run.report["sources"]["ld_start"]
                .as_str()
                .unwrap()
                .starts_with("uprobe"),
            "{}",
            run.report["sources"]
        );
        // ld_map still ends at arch_prctl(ARCH_SET_FS): its source names sys_enter too.
        let ld_map = run.report["sources"]["ld_map"].as_str().unwrap();
        assert!(
            ld_map.starts_with("uprobe") && ld_map.contains("raw_tp sys_enter"),
            "{ld_map}"
        );
        let (exec, ld) = phase_means(&run, binary);
        let truth = mean(&truth[0]);
        eprintln!(
            "--precise-ld {binary}: exec→main {:.1} us; exec {:.1} + ld {:?} us",
            truth / 1e3,
            exec / 1e3,
            ld.map(|v| (v / 1e2).round() / 10.0)
        );
        assert_close(binary, exec + ld.iter().sum::<f64>(), truth, 0.10, 30_000.0);
    }
}

/// An ext4 image loop-mounted with `options`, unmounted on drop.
struct LoopMount {
    dir: PathBuf,
    mnt: PathBuf,
}

impl LoopMount {
    fn new(options: &str) -> Self {
        let dir = tempdir();
        let img = dir.join("fs.img");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("truncate").args(["-s", "32M"]).arg(&img));
        ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img));
        ok(Command::new("mount")
            .args(["-o", &format!("loop,{options}")])
            .arg(&img)
            .arg(&mnt));
        Self { dir, mnt }
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What `atime_updates` saw: the binary's atime changes by stat, forkprof's count of atime
/// updates in those execs, and the time (ns) those exec syscalls took in all.
struct AtimeRun {
    changes: u64,
    traced: u64,
    exec_ns: u64,
}

/// Runs a static binary from the mount 200 times, printing its atime (ns) after each run.
fn atime_updates(fx: &Fixtures, options: &str) -> AtimeRun {
    let m = LoopMount::new(options);
    let bin = m.mnt.join("fp-atime-probe");
    std::fs::copy(fx.dir.join("main_static"), &bin).unwrap();
    // Start from an atime in the past so that the first exec must update it (relatime too).
    let st = Command::new("touch")
        .args(["-a", "-d", "2001-01-01"])
        .arg(&bin)
        .status()
        .unwrap();
    assert!(st.success());
    let script = format!(
        "for i in $(seq 200); do {0} >/dev/null; stat -c %x {0}; done",
        bin.display()
    );
    let run = run_traced(&["sh", "-c", &script], |_| {});
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let out = run.stdout();
    let mut last = "2001-01-01".to_string();
    let mut changes = 0;
    for line in out.lines() {
        if !line.starts_with(&last) {
            changes += 1;
            last = line.to_string();
        }
    }
    let probes: Vec<&Value> = run.report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["binary"].as_str().unwrap().ends_with("fp-atime-probe"))
        .collect();
    AtimeRun {
        changes,
        traced: probes
            .iter()
            .map(|p| p["atime_updates"].as_u64().unwrap())
            .sum(),
        exec_ns: probes
            .iter()
            .map(|p| p["phases"]["exec"].as_u64().unwrap_or(0))
            .sum(),
    }
}

/// The kernel's timestamp granularity (ns): the resolution of CLOCK_REALTIME_COARSE, one tick.
fn coarse_tick_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: plain syscall into a local.
    assert_eq!(
        unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn atime_updates_match_the_binarys_atime_changes() {
    needs_root!();
    let fx = Fixtures::build();
    let r = atime_updates(&fx, "strictatime");
    let tick = coarse_tick_ns();
    // An exec touches the binary's atime more than once (the header read, then each mapped
    // segment); strictatime updates it whenever the coarse clock (one tick) has moved since.
    // Stat sees one change per exec, but when a tick boundary falls inside the exec
    // syscall, the kernel really updates the atime twice. So forkprof's count is never
    // below stat's, and exceeds it by at most the boundaries the execs straddle: about
    // (their time in all) / tick, taken three times over, plus 3, for the chance of it.
    let straddled = r.exec_ns / tick;
    eprintln!(
        "strictatime: stat saw {} atime changes, forkprof {} updates; execs {} µs in all, tick {} µs",
        r.changes,
        r.traced,
        r.exec_ns / 1000,
        tick / 1000
    );
    assert!(r.changes > 0, "strictatime exec never changed the atime");
    assert!(r.traced >= r.changes, "an atime update was missed");
    assert!(
        r.traced <= r.changes + 3 * straddled + 3,
        "more updates than execs straddling a tick can explain"
    );
    let r = atime_updates(&fx, "noatime");
    assert_eq!((r.changes, r.traced), (0, 0), "noatime");
}
