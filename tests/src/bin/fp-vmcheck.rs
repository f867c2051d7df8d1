//! forkprof's functional checks inside a qemu guest (`cargo xtask vm-test`), and on the host
//! `fp-vmcheck support-table LABEL=DOCTOR.json...`, which turns `forkprof doctor --json`
//! outputs into a markdown table of phase sources (rows: phases, columns: kernels).
//!
//! In the guest (no arguments) every check prints one line, `VMCHECK <name> PASS|FAIL|SKIP
//! <detail>`, then `VMCHECK-DONE passed=N failed=M`. `VMDOCTOR <json>` carries doctor's JSON
//! out. Everything it runs lives under /fp/.
use std::fs::File;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use forkprof_tests::SYSCALL_FUNCTION_HOOKS;
use serde_json::Value;

const FORKPROF: &str = "/fp/forkprof";
/// A 32-bit process that spawns through the ia32 syscall table (tests/fixtures/spawn32.c).
const SPAWN32: &str = "/fp/spawn32";
/// A 32-bit process that sleeps a second and then execs its argument (wait32.c).
const WAIT32: &str = "/fp/wait32";
const WORKLOAD: &str = "/fp/fp-workload";
const DYN: &str = "/fp/dyn_true";
const STATIC: &str = "/fp/static_true";
/// No single forkprof command may take longer (the verifier is slow under TCG).
const TIMEOUT: Duration = Duration::from_secs(240);
/// The phases `mix` exercises, which must be counted unless `sources` says "not measured".
const EXERCISED: &[&str] = &[
    "fork",
    "vfork_wait",
    "exec",
    "exec_prepare",
    "exec_load",
    "ld_start",
    "ld_map",
    "ld_reloc_init",
    "pagetable_copy",
    "child_run",
    "exit_teardown",
    "spawn_cost",
    "cow_faults",
];
/// Row order of the support table; phases not listed here follow, sorted.
const PHASE_ORDER: &[&str] = &[
    "fork",
    "pagetable_copy",
    "vfork_wait",
    "child_run",
    "exec",
    "exec_prepare",
    "exec_load",
    "exec_failed",
    "static_start",
    "ld_start",
    "ld_map",
    "ld_reloc_init",
    "atime",
    "cow_faults",
    "cow_fault_time",
    "exit_teardown",
    "spawn_cost",
];

/// What a command did: its exit code (128+N when killed by signal N), or None when it could
/// not start or timed out, and its output.
struct Ran {
    code: Option<i32>,
    what: String,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// The exit status and the tail of stderr, for a detail line.
    fn brief(&self) -> String {
        let tail: Vec<&str> = self.stderr.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("{}; stderr: {}", self.what, clip(&tail.join(" | "), 400))
    }
}

fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Runs `args` with stdout and stderr in files (no pipe to fill), killed after `TIMEOUT`.
fn exec(args: &[&str]) -> Ran {
    exec_within(args, TIMEOUT)
}

/// A host test binary's bound: its tests run one after another, and each starts agents,
/// which under TCG on a slow host took over 30 s to start (`host_tests_pass`).
const HOST_TESTS_TIMEOUT: Duration = Duration::from_secs(480);

/// `exec`, killed after `limit`.
fn exec_within(args: &[&str], limit: Duration) -> Ran {
    let ran = |code, what: String| Ran {
        code,
        what,
        stdout: std::fs::read_to_string("/tmp/vmcheck.out").unwrap_or_default(),
        stderr: std::fs::read_to_string("/tmp/vmcheck.err").unwrap_or_default(),
    };
    let files =
        File::create("/tmp/vmcheck.out").and_then(|o| Ok((o, File::create("/tmp/vmcheck.err")?)));
    let spawned = files.and_then(|(out, err)| {
        Command::new(args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
    });
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return ran(None, format!("cannot start {}: {e}", args[0])),
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let code = st.code().or(st.signal().map(|s| 128 + s));
                let what = match st.signal() {
                    Some(s) => format!("killed by signal {s}"),
                    None => format!("exit {}", code.unwrap_or(-1)),
                };
                return ran(code, what);
            }
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return ran(None, format!("timed out after {}s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return ran(None, format!("wait failed: {e}")),
        }
    }
}

fn read_json(path: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{path}: not JSON: {e}"))
}

/// `forkprof run ARGS`, expecting exit 0, and its JSON report at `report`.
fn run_report(args: &[&str], report: &str) -> Result<Value, String> {
    run_report_with(&[], args, report)
}

/// `run_report` with `env` (`NAME=VALUE`) in forkprof's environment.
fn run_report_with(env: &[&str], args: &[&str], report: &str) -> Result<Value, String> {
    run_report_flags(env, &[], args, report)
}

/// `run_report_with` with `forkprof run` flags.
fn run_report_flags(
    env: &[&str],
    flags: &[&str],
    args: &[&str],
    report: &str,
) -> Result<Value, String> {
    let _ = std::fs::remove_file(report);
    let mut all = vec!["/bin/env"];
    all.extend_from_slice(env);
    all.extend_from_slice(&[FORKPROF, "run", "--json", "--report", report]);
    all.extend_from_slice(flags);
    all.push("--");
    all.extend_from_slice(args);
    let ran = exec(&all);
    if ran.code != Some(0) {
        return Err(format!("forkprof run: {}", ran.brief()));
    }
    read_json(report)
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// The reason after "not measured", if `source` says a phase is not measured.
fn not_measured(source: &str) -> Option<&str> {
    source
        .strip_prefix("not measured")
        .map(|r| r.trim_start_matches([':', ' ']).trim())
}

fn doctor() -> Result<String, String> {
    let ran = exec(&[FORKPROF, "doctor", "--json"]);
    let doc: Value = serde_json::from_str(ran.stdout.trim())
        .map_err(|e| format!("doctor --json: {}; stdout not JSON: {e}", ran.brief()))?;
    if doc.is_object() {
        println!("VMDOCTOR {doc}");
    }
    if ran.code != Some(0) {
        return Err(format!("doctor --json: {}", ran.brief()));
    }
    let hooks = doc["hooks"]
        .as_array()
        .ok_or("doctor --json: no hooks array")?;
    let (mut attached, mut failed, mut bad) = (Vec::new(), Vec::new(), Vec::new());
    for h in hooks {
        let name = h["hook"].as_str().unwrap_or("?");
        // A required job's alternatives (another tracepoint layout, a kprobe where fentry
        // works) may fail; the source it uses must not.
        let required = h["required"].as_bool() == Some(true) && h["used"].as_bool() == Some(true);
        match h["status"].as_str() {
            Some("attached") => attached.push(name.to_string()),
            Some("failed") => {
                let error = clip(h["error"].as_str().unwrap_or("no reason"), 80);
                failed.push(format!("{name} ({error})"));
                if required {
                    bad.push(format!("required {name} failed: {error}"));
                }
            }
            other => bad.push(format!("{name}: status {other:?}")),
        }
    }
    for h in hooks {
        let job = h["job"].as_str().unwrap_or("?");
        let uses = |g: &&Value| g["job"].as_str() == Some(job) && g["used"].as_bool() == Some(true);
        if h["required"].as_bool() == Some(true) && !hooks.iter().any(|g| uses(&g)) {
            bad.push(format!("required job {job} has no source attached"));
        }
    }
    // The sources these kernels never use (fentry wins) are still loaded and attached by
    // doctor: where kprobes work, the kprobe pair on dup_mmap's calls must attach too.
    let has = |hook: &str| attached.iter().any(|a| a == hook);
    if has("kprobe do_wp_page") {
        for hook in ["kprobe uprobe_dup_mmap", "kprobe dup_userfaultfd_complete"] {
            if !has(hook) {
                bad.push(format!("{hook} did not attach where kprobes do"));
            }
        }
    }
    // The syscalls job's fentry/fexit source is as large as the cgroup-scope check expects.
    let functions = hooks
        .iter()
        .filter(|h| {
            h["job"] == "syscalls" && matches!(h["kind"].as_str(), Some("fentry" | "fexit"))
        })
        .count();
    if functions != SYSCALL_FUNCTION_HOOKS {
        bad.push(format!(
            "{functions} fentry/fexit hooks in the syscalls job (want {SYSCALL_FUNCTION_HOOKS})"
        ));
    }
    bad.dedup();
    let hooks = format!(
        "attached [{}]; failed [{}]",
        attached.join(", "),
        failed.join(", ")
    );
    if !bad.is_empty() {
        return Err(format!("{}; {hooks}", bad.join("; ")));
    }
    let plain = exec(&[FORKPROF, "doctor"]);
    if plain.stdout.contains("not tried") || plain.stderr.contains("not tried") {
        return Err(format!(
            "plain doctor says \"not tried\" ({}); {hooks}",
            plain.what
        ));
    }
    Ok(hooks)
}

fn run_mix(report: &Value) -> Result<String, String> {
    let processes = report["summary"]["processes"].as_u64();
    let methods = &report["methods"];
    let want = [("fork", 50), ("vfork", 50), ("posix_spawn", 50)];
    let mut wrong: Vec<String> = want
        .iter()
        .filter(|(m, n)| methods[*m].as_u64().unwrap_or(0) != *n)
        .map(|(m, n)| format!("{m}={} (want {n})", methods[*m]))
        .collect();
    if let Some(obj) = methods.as_object() {
        for (m, n) in obj {
            // The root (CMD) has no spawn record, so `methods` may leave its `unknown` out.
            let max = if m == "unknown" { 1 } else { 0 };
            if !want.iter().any(|(w, _)| w == m) && n.as_u64().is_none_or(|n| n > max) {
                wrong.push(format!("{m}={n} (want at most {max})"));
            }
        }
    }
    if processes != Some(151) {
        wrong.push(format!("processes={processes:?} (want 151)"));
    }
    let detail = format!("processes={processes:?} methods={methods}");
    if wrong.is_empty() {
        Ok(detail)
    } else {
        Err(format!("{}; {detail}", wrong.join(", ")))
    }
}

fn phases_measured(report: &Value) -> Result<String, String> {
    let sources = report["sources"].as_object().ok_or("no sources object")?;
    let (mut measured, mut unmeasured, mut bad) = (Vec::new(), Vec::new(), Vec::new());
    for (phase, source) in sources {
        let source = source.as_str().unwrap_or("");
        if let Some(reason) = not_measured(source) {
            unmeasured.push(format!("{phase} ({})", clip(reason, 60)));
            if reason.is_empty() {
                bad.push(format!("{phase}: \"not measured\" without a reason"));
            }
        }
    }
    // Where fentry attaches (do_wp_page's says so), the syscall functions are hooked, not
    // sys_enter and sys_exit, which put every syscall of every task on the slow path.
    let fork = sources.get("fork").and_then(Value::as_str).unwrap_or("");
    let wp = sources
        .get("cow_fault_time")
        .and_then(Value::as_str)
        .unwrap_or("");
    if wp.starts_with("fentry") && !fork.starts_with("fentry/fexit") {
        bad.push(format!("fork from {fork:?} where fentry attaches"));
    }
    let optional = sources
        .contains_key("cow_fault_time")
        .then_some("cow_fault_time");
    for &phase in EXERCISED.iter().chain(optional.iter()) {
        let source = sources.get(phase).and_then(Value::as_str).unwrap_or("");
        if not_measured(source).is_some() {
            continue;
        }
        match report["phases"][phase]["count"].as_u64() {
            Some(n) if n > 0 => measured.push(phase),
            n => bad.push(format!("{phase} count {n:?} (source {source:?})")),
        }
    }
    let detail = format!(
        "measured [{}]; not measured [{}]",
        measured.join(", "),
        unmeasured.join(", ")
    );
    if bad.is_empty() {
        Ok(detail)
    } else {
        Err(format!("{}; {detail}", bad.join("; ")))
    }
}

fn invariants(report: &Value) -> Result<String, String> {
    let procs = report["processes"].as_array().ok_or("no processes array")?;
    let source = |p: &str| report["sources"][p].as_str().unwrap_or("");
    let ld_measured = ["ld_start", "ld_map", "ld_reloc_init"]
        .iter()
        .all(|p| not_measured(source(p)).is_none());
    let (mut checked, mut violations) = (0, Vec::new());
    // (exec_prepare + exec_load) / exec of each exec: a successful exec ends at
    // sched_process_exec, where exec_load ends, so where the point of no return is hooked the
    // split is the whole exec. Each split must nest in its exec, and the median must be all
    // of it (a process whose exec failed after the point of no return may differ).
    let mut covered = Vec::new();
    for p in procs {
        let pid = &p["pid"];
        let ph = |name: &str| num(&p["phases"][name]);
        if let (Some(pt), Some(fork)) = (ph("pagetable_copy"), ph("fork")) {
            checked += 1;
            if pt > fork {
                violations.push(format!("pid {pid}: pagetable_copy {pt} > fork {fork}"));
            }
        }
        if let (Some(prep), Some(load), Some(exec)) =
            (ph("exec_prepare"), ph("exec_load"), ph("exec"))
        {
            checked += 1;
            covered.push((prep + load) / exec.max(1.0));
            if prep + load > exec {
                violations.push(format!(
                    "pid {pid}: exec_prepare {prep} + exec_load {load} vs exec {exec}"
                ));
            }
        }
        if ld_measured && p["binary"].as_str() == Some(DYN) {
            checked += 1;
            let missing: Vec<&str> = ["ld_start", "ld_map", "ld_reloc_init"]
                .into_iter()
                .filter(|n| ph(n).is_none())
                .collect();
            if !missing.is_empty() {
                violations.push(format!("pid {pid} ({DYN}): no {}", missing.join(", ")));
            }
        }
    }
    covered.sort_by(f64::total_cmp);
    let median = covered.get(covered.len() / 2).copied();
    if median.is_some_and(|m| m < 0.999) {
        violations.push(format!(
            "median (exec_prepare + exec_load) / exec {:.4} < 0.999",
            median.unwrap_or(0.0)
        ));
    }
    let detail = format!(
        "{} processes, {checked} invariants checked, median exec split coverage {:.2}",
        procs.len(),
        median.unwrap_or(0.0)
    );
    if violations.is_empty() {
        return Ok(detail);
    }
    let first: Vec<&str> = violations.iter().take(5).map(String::as_str).collect();
    Err(format!(
        "{} violations: {}; {detail}",
        violations.len(),
        first.join("; ")
    ))
}

fn lineage(report: &Value) -> Result<String, String> {
    let procs = report["processes"].as_array().ok_or("no processes array")?;
    let root = procs
        .iter()
        .find(|p| p["method"] == "unknown")
        .ok_or("no root process (method unknown)")?;
    let root_pid = &root["pid"];
    let mut bad = Vec::new();
    for p in procs.iter().filter(|p| p["pid"] != *root_pid) {
        if p["parent_pid"] != *root_pid {
            bad.push(format!(
                "pid {} parent {} (root {root_pid})",
                p["pid"], p["parent_pid"]
            ));
        }
        if p["binary"].as_str() != Some(DYN) {
            bad.push(format!("pid {} binary {}", p["pid"], p["binary"]));
        }
        // The workload execs with argv = [path]: read from the new image's stack.
        let exec = &p["execs"][0];
        if exec["args"] != serde_json::json!([DYN]) || exec["argc"] != 1 {
            bad.push(format!(
                "pid {} argv {} argc {}",
                p["pid"], exec["args"], exec["argc"]
            ));
        }
    }
    let detail = format!("root {root_pid} with {} children", procs.len() - 1);
    if bad.is_empty() {
        return Ok(detail);
    }
    let first: Vec<&str> = bad.iter().take(5).map(String::as_str).collect();
    Err(format!(
        "{} wrong: {}; {detail}",
        bad.len(),
        first.join("; ")
    ))
}

/// Two exec attempts that fail (ENOENT), each in a child of sh: both counted, timed, and
/// listed by path, which is read from the caller's memory at the syscall's return (sys_exit,
/// or fexit on the syscall function where trampolines attach).
fn failed_exec() -> Result<String, String> {
    const PATHS: [&str; 2] = ["/fp/no-such-a", "/fp/no-such-b"];
    let script = format!("{}; {}; true", PATHS[0], PATHS[1]);
    let report = run_report(&["/bin/sh", "-c", &script], "/tmp/failed.json")?;
    let failed = report["summary"]["failed_execs"].as_u64();
    let rows = report["groups"]["binary"]
        .as_array()
        .ok_or("no binary rows")?;
    let mut listed: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["failed_exec_paths"].as_object())
        .flat_map(|paths| paths.keys().map(String::as_str))
        .collect();
    listed.sort_unstable();
    let timed = report["phases"]["exec_failed"]["count"].as_u64();
    let detail = format!("failed_execs {failed:?}, exec_failed count {timed:?}, paths {listed:?}");
    if failed == Some(2) && listed == PATHS && timed.is_some_and(|n| n >= 1) {
        Ok(detail)
    } else {
        Err(format!("want 2 failures of {PATHS:?}, timed; {detail}"))
    }
}

/// A 32-bit process's children, made and exec'd through the ia32 syscalls: from the ia32
/// syscall functions where fentry attaches, else (`env`: FORKPROF_TEST_NO_FENTRY=1) from
/// sys_enter/sys_exit, which see ia32 numbers.
fn ia32(env: &[&str]) -> Result<String, String> {
    let report = run_report_with(env, &[SPAWN32], "/tmp/ia32.json")?;
    let fork = report["sources"]["fork"].as_str().unwrap_or("");
    let want = if env.is_empty() {
        "fentry"
    } else {
        "tp_btf sys_enter"
    };
    if !fork.starts_with(want) {
        return Err(format!("fork from {fork:?} (want {want}…)"));
    }
    forkprof_tests::check_spawn32(&report, SPAWN32)
}

/// `--ia32-syscalls on-demand` (the default) where trampolines are refused (`env`:
/// FORKPROF_TEST_NO_FENTRY=1): the classic syscall events, with sys_enter and sys_exit
/// attached for ia32 syscalls once a followed process execs a 32-bit image. Each of the
/// first 32-bit spawner's four spawns is followed or counted as unseen; a second one, two
/// seconds later, is followed whole.
fn ia32_on_demand(env: &[&str]) -> Result<String, String> {
    let second = "/tmp/spawn32-second";
    std::fs::copy(SPAWN32, second).map_err(|e| format!("copying {SPAWN32}: {e}"))?;
    // `:` last, so that the shell does not exec the second spawner in its place.
    let script = format!("{SPAWN32}; sleep 2; {second}; :");
    let report = run_report_flags(
        env,
        &["--ia32-syscalls", "on-demand"],
        &["/bin/sh", "-c", &script],
        "/tmp/ia32-on-demand.json",
    )?;
    let exec = report["sources"]["exec"].as_str().unwrap_or("");
    if !exec.starts_with(forkprof_tests::SYSCALL_EVENTS_SOURCE)
        || !exec.contains("attached when the first was seen")
    {
        return Err(format!("exec from {exec:?}"));
    }
    let unseen = report["summary"]["lost"]["ia32_unseen"]
        .as_u64()
        .unwrap_or(0);
    let early = forkprof_tests::children_of(&report, SPAWN32)?.len() as u64;
    if early + unseen != 4 {
        return Err(format!(
            "the first spawner: {early} children followed and {unseen} unseen (want 4 in all)"
        ));
    }
    let second_whole = forkprof_tests::check_spawn32(&report, second)?;
    Ok(format!(
        "the first spawner: {early} followed, {unseen} unseen; the second: {second_whole}"
    ))
}

/// `--ia32-syscalls on-demand` with the hooks' linger shortened to 200 ms: they are
/// detached while the shell sleeps after the first spawner, attached again at wait32's exec,
/// kept while it sleeps a second, and the second spawner it execs is followed whole.
fn ia32_on_demand_detach(env: &[&str]) -> Result<String, String> {
    let second = "/tmp/spawn32-after-wait";
    std::fs::copy(SPAWN32, second).map_err(|e| format!("copying {SPAWN32}: {e}"))?;
    // `run` tends the hooks once a second: the detach's two steps come 2-4 s after the
    // first spawner.
    let script = format!("{SPAWN32}; sleep 6; {WAIT32} {second}; :");
    let mut env = env.to_vec();
    env.push("FORKPROF_TEST_IA32_LINGER_MS=200");
    let report = run_report_flags(
        &env,
        &["--ia32-syscalls", "on-demand"],
        &["/bin/sh", "-c", &script],
        "/tmp/ia32-on-demand-detach.json",
    )?;
    let exec = report["sources"]["exec"].as_str().unwrap_or("");
    if !exec.contains("detached once none was left for 200 ms (attached 2 times") {
        return Err(format!("exec from {exec:?}"));
    }
    let second_whole = forkprof_tests::check_spawn32(&report, second)?;
    Ok(format!(
        "attached twice; the second spawner: {second_whole}"
    ))
}

/// `--no-ia32-syscalls`. Where fentry attaches it changes nothing: the 32-bit spawner is
/// followed whole from the syscall functions. With `env` FORKPROF_TEST_NO_FENTRY=1 the
/// classic syscall events are the source: the spawner's four fork-family syscalls are
/// counted as unseen and its children not followed, while a 64-bit spawner's children are
/// timed whole, their dynamic linker included.
fn no_ia32_syscalls(env: &[&str]) -> Result<String, String> {
    let flags = ["--no-ia32-syscalls"];
    let report = run_report_flags(env, &flags, &[SPAWN32], "/tmp/no-ia32.json")?;
    let fork = report["sources"]["fork"].as_str().unwrap_or("");
    let unseen = &report["summary"]["lost"]["ia32_unseen"];
    if env.is_empty() {
        if !fork.starts_with("fentry") {
            return Err(format!("fork from {fork:?} (want fentry…)"));
        }
        if !unseen.is_null() {
            return Err(format!("ia32_unseen {unseen} with trampolines"));
        }
        return forkprof_tests::check_spawn32(&report, SPAWN32);
    }
    if !fork.starts_with(forkprof_tests::SYSCALL_EVENTS_SOURCE) {
        return Err(format!(
            "fork from {fork:?} (want the classic syscall events)"
        ));
    }
    let kids = forkprof_tests::children_of(&report, SPAWN32)?.len();
    if unseen != 4 || kids != 0 {
        return Err(format!(
            "ia32_unseen {unseen} (want 4), {kids} children followed (want 0)"
        ));
    }
    let report = run_report_flags(
        env,
        &flags,
        &[WORKLOAD, "spawn", "fork", "5", DYN],
        "/tmp/no-ia32-dyn.json",
    )?;
    let procs = report["processes"].as_array().ok_or("no processes array")?;
    let kids: Vec<&Value> = procs.iter().filter(|p| p["binary"] == DYN).collect();
    let whole = kids
        .iter()
        .filter(|p| {
            ["fork", "exec", "ld_start", "ld_map", "ld_reloc_init"]
                .iter()
                .all(|ph| num(&p["phases"][ph]).is_some_and(|ns| ns > 0.0))
        })
        .count();
    if kids.len() != 5 || whole != 5 {
        return Err(format!(
            "{} children of {DYN} (want 5), {whole} with fork, exec and the dynamic linker timed",
            kids.len()
        ));
    }
    Ok(format!(
        "32-bit spawns unseen {unseen}, 5 64-bit children timed whole"
    ))
}

fn exit_codes() -> Result<String, String> {
    let cases: [(&[&str], i32); 3] = [
        (&[WORKLOAD, "exit", "3"], 3),
        (&[WORKLOAD, "kill", "9"], 137),
        (&["/nonexistent"], 127),
    ];
    let (mut seen, mut ok) = (Vec::new(), true);
    for (cmd, want) in cases {
        let mut args = vec![FORKPROF, "run", "--"];
        args.extend_from_slice(cmd);
        let ran = exec(&args);
        ok &= ran.code == Some(want);
        let mut line = format!("{} -> {} (want {want})", cmd.join(" "), ran.what);
        if ran.code != Some(want) {
            line = format!("{line}: {}", ran.brief());
        }
        seen.push(line);
    }
    let detail = seen.join("; ");
    if ok { Ok(detail) } else { Err(detail) }
}

fn static_start() -> Result<String, String> {
    let report = run_report(&[WORKLOAD, "spawn", "fork", "5", STATIC], "/tmp/st.json")?;
    let procs = report["processes"].as_array().ok_or("no processes array")?;
    let kids: Vec<&Value> = procs.iter().filter(|p| p["binary"] == STATIC).collect();
    let mut bad = Vec::new();
    if kids.len() != 5 {
        bad.push(format!("{} processes of {STATIC} (want 5)", kids.len()));
    }
    for p in &kids {
        let ph = &p["phases"];
        if num(&ph["static_start"]).is_none() {
            bad.push(format!("pid {}: no static_start", p["pid"]));
        }
        if num(&ph["ld_map"]).is_some_and(|v| v > 0.0) {
            bad.push(format!("pid {}: ld_map {}", p["pid"], ph["ld_map"]));
        }
    }
    let starts: Vec<String> = kids
        .iter()
        .map(|p| p["phases"]["static_start"].to_string())
        .collect();
    let detail = format!("static_start [{}]", starts.join(", "));
    if bad.is_empty() {
        Ok(detail)
    } else {
        Err(format!("{}; {detail}", bad.join("; ")))
    }
}

/// A fork child waits while its parent writes `PAGES` pages: the child's `cow_faults` counts
/// them (the parent's faults inside the child's window), and where the kernel lets forkprof
/// hook `do_wp_page`, `cow_fault_time` has their time.
///
/// With `FORKPROF_TEST_NO_FENTRY=1` in `env`, the kprobes on `do_wp_page` must count and time
/// them (what a kernel that refuses only fentry would use).
fn cow(env: &[&str]) -> Result<String, String> {
    const PAGES: f64 = 200.0;
    let report = run_report_with(env, &[WORKLOAD, "cow", "200"], "/tmp/cow.json")?;
    let counted_by = report["sources"]["cow_faults"].as_str().unwrap_or("");
    if !env.is_empty() && !counted_by.starts_with("kprobe") {
        return Err(format!("cow_faults from {counted_by:?} with {env:?}"));
    }
    let procs = report["processes"].as_array().ok_or("no processes array")?;
    let kids: Vec<&Value> = procs.iter().filter(|p| p["method"] == "fork").collect();
    let [child] = kids[..] else {
        return Err(format!("{} fork children (want 1)", kids.len()));
    };
    let faults = num(&child["phases"]["cow_faults"]).ok_or("no cow_faults")?;
    if (faults - PAGES).abs() > 0.05 * PAGES {
        return Err(format!("cow_faults {faults} for {PAGES} pages written"));
    }
    let source = report["sources"]["cow_fault_time"].as_str().unwrap_or("");
    // Where do_wp_page is hooked it counts the faults too: no hook on every page fault.
    if not_measured(source).is_none() && counted_by.contains("page_fault_user") {
        return Err(format!(
            "cow_faults from {counted_by:?} where do_wp_page is hooked ({source})"
        ));
    }
    let time = num(&child["phases"]["cow_fault_time"]);
    match (not_measured(source), time) {
        (Some(_), None) => Ok(format!(
            "cow_faults {faults}; cow_fault_time not measured here"
        )),
        (None, Some(ns)) if ns > 0.0 => Ok(format!(
            "cow_faults {faults}; cow_fault_time {:.0} µs ({source})",
            ns / 1e3
        )),
        (why, time) => Err(format!(
            "cow_fault_time {time:?} but source {source:?} (not measured: {})",
            why.is_some()
        )),
    }
}

/// A parent with 256 MiB resident forks three times: whichever source this kernel gives
/// `pagetable_copy` (all of dup_mmap, or its write-locked span), the copy must be most of the
/// fork. What it leaves out (the syscall's entry and return, the task's other copies) does
/// not grow with the parent, and the 65536 page-table entries copied take far longer. The
/// host's accuracy test asks for 90% with 1 GiB and real timings. Here more than half: under
/// TCG the two vCPUs share the host's CPUs with qemu's own threads, so the task can lose its
/// CPU anywhere in the syscall (medians of 0.87-0.97 seen), while a bracket around the wrong
/// span would hold a few percent of the fork.
///
/// With `FORKPROF_TEST_NO_FENTRY=1` in `env`, a kprobe source must measure it.
fn pagetable_copy(env: &[&str]) -> Result<String, String> {
    const FORKS: usize = 3;
    let report = run_report_with(
        env,
        &[
            "/bin/env",
            "FP_RSS_MIB=256",
            WORKLOAD,
            "spawn",
            "fork-held",
            &FORKS.to_string(),
        ],
        "/tmp/pt.json",
    )?;
    let source = report["sources"]["pagetable_copy"].as_str().unwrap_or("");
    if let Some(why) = not_measured(source) {
        return Err(format!("pagetable_copy not measured: {why}"));
    }
    if !env.is_empty() && !source.starts_with("kprobe") {
        return Err(format!("pagetable_copy from {source:?} with {env:?}"));
    }
    // Without trampolines the syscalls come from the classic events (by default) or from
    // sys_enter and sys_exit.
    let fork = report["sources"]["fork"].as_str().unwrap_or("");
    if !env.is_empty()
        && !fork.starts_with(forkprof_tests::SYSCALL_EVENTS_SOURCE)
        && !fork.starts_with("tp_btf sys_enter")
    {
        return Err(format!("fork from {fork:?} with {env:?}"));
    }
    // Where fentry attaches (do_wp_page's says so), no mmap_lock event is hooked: dup_mmap,
    // or its calls around the write-locked span where it is inlined, bracket the copy.
    let wp = report["sources"]["cow_fault_time"].as_str().unwrap_or("");
    if wp.starts_with("fentry") && source.contains("mmap_lock") {
        return Err(format!(
            "pagetable_copy from {source:?} where fentry attaches"
        ));
    }
    let procs = report["processes"].as_array().ok_or("no processes array")?;
    let mut shares: Vec<f64> = Vec::new();
    for p in procs.iter().filter(|p| p["method"] == "fork") {
        let (Some(pt), Some(fork)) = (
            num(&p["phases"]["pagetable_copy"]),
            num(&p["phases"]["fork"]),
        ) else {
            return Err(format!("pid {}: no pagetable_copy or fork", p["pid"]));
        };
        shares.push(pt / fork.max(1.0));
    }
    if shares.len() != FORKS {
        return Err(format!("{} fork children (want {FORKS})", shares.len()));
    }
    shares.sort_by(f64::total_cmp);
    let median = shares[FORKS / 2];
    let detail = format!("median pagetable_copy / fork {median:.3} of {shares:.3?} ({source})");
    if median <= 0.5 {
        return Err(detail);
    }
    Ok(detail)
}

fn record_report() -> Result<String, String> {
    let db = "/tmp/r.db";
    let _ = std::fs::remove_file(db);
    let ran = exec(&[FORKPROF, "run", "-o", db, "--", WORKLOAD, "mix", "5", DYN]);
    if ran.code != Some(0) {
        return Err(format!("forkprof run -o: {}", ran.brief()));
    }
    let ran = exec(&[FORKPROF, "report", db, "--format", "json"]);
    if ran.code != Some(0) {
        return Err(format!("forkprof report: {}", ran.brief()));
    }
    let doc: Value =
        serde_json::from_str(&ran.stdout).map_err(|e| format!("report: not JSON: {e}"))?;
    match doc["summary"]["processes"].as_u64() {
        Some(16) => Ok(format!("16 processes; methods {}", doc["methods"])),
        n => Err(format!(
            "processes {n:?} (want 16); methods {}",
            doc["methods"]
        )),
    }
}

/// Polls `path` until it holds `text`, for at most TIMEOUT.
/// The child's exit status, or None when it has not exited within TIMEOUT (it is killed then).
fn wait_or_kill(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < TIMEOUT {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(_) => return None,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn wait_for_text(path: &str, text: &str) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let now = std::fs::read_to_string(path).unwrap_or_default();
        if now.contains(text) {
            return Ok(());
        }
        if start.elapsed() > TIMEOUT {
            return Err(format!("no {text:?} in {path}: {}", clip(&now, 600)));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `record --cgroup` of an empty cgroup v2 group (the init mounts cgroup2 at /sys/fs/cgroup):
/// no hook that fires on every syscall or page fault is attached until a process comes in;
/// then a shell there (which waits for that) and its 10 children are recorded, with their
/// execs measured, and 5 spawns outside the group are not.
fn cgroup_scope() -> Result<String, String> {
    use std::io::Write as _;
    let group = "/sys/fs/cgroup/fp.service";
    std::fs::create_dir_all(group).map_err(|e| format!("mkdir {group}: {e} (no cgroup2?)"))?;
    let (db, err) = ("/tmp/cg.db", "/tmp/cg.err");
    let _ = std::fs::remove_file(db);
    let log = File::create(err).map_err(|e| e.to_string())?;
    let mut rec = Command::new(FORKPROF)
        .args([
            "record",
            "--cgroup",
            "/fp.service",
            "--duration",
            "600s",
            "-o",
            db,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start forkprof record: {e}"))?;
    // SIGINT, and SIGKILL if it has not exited within TIMEOUT: a check never hangs the boot.
    let stop = |rec: &mut std::process::Child| {
        // SAFETY: kill has no memory preconditions; the pid is our own child's.
        unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
        let code = wait_or_kill(rec).and_then(|st| st.code());
        if code.is_none() {
            let said = std::fs::read_to_string(err).unwrap_or_default();
            println!(
                "VMINFO forkprof record did not exit on SIGINT: {}",
                clip(&said, 1500)
            );
        }
        code
    };
    if let Err(e) = wait_for_text(err, "forkprof: recording") {
        stop(&mut rec);
        return Err(e);
    }
    let idle = forkprof_tests::attached_tracepoints(rec.id());
    let idle_trampolines = forkprof_tests::attached_trampolines(rec.id());
    // No hot hook while the group is empty: no hot tracepoint, and no fentry or fexit but
    // the one non-hot job's (begin_new_exec, before 6.10). Once it has a process, the
    // syscalls job's hooks: its fentry/fexit on the syscall functions where trampolines
    // attach (these kernels), else the classic syscall events (or sys_enter and sys_exit). page_fault_user and the mmap_lock
    // pair attach only where fentry on do_wp_page and dup_mmap's calls is refused.
    let hot = forkprof_tests::HOT_TRACEPOINTS;
    if idle_trampolines > 1 {
        stop(&mut rec);
        return Err(format!(
            "{idle_trampolines} fentry/fexit links while the group was empty (want at most 1)"
        ));
    }
    if idle.is_empty() || hot.iter().any(|h| idle.iter().any(|t| t == h)) {
        stop(&mut rec);
        return Err(format!("attached while the group was empty: {idle:?}"));
    }
    let script =
        format!("echo $$ > {group}/cgroup.procs && read go && exec {WORKLOAD} spawn fork 10 {DYN}");
    let shell = Command::new("/bin/sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn();
    let mut shell = match shell {
        Ok(sh) => sh,
        Err(e) => {
            stop(&mut rec);
            return Err(format!("cannot start sh: {e}"));
        }
    };
    let armed = wait_for_text(err, "hooks are attached now");
    let attached = forkprof_tests::attached_tracepoints(rec.id());
    let armed_trampolines = forkprof_tests::attached_trampolines(rec.id());
    let _ = shell.stdin.take().map(|mut i| writeln!(i, "go"));
    let shell_ok = wait_or_kill(&mut shell).is_some_and(|st| st.success());
    let outside = exec(&[WORKLOAD, "spawn", "fork", "5", DYN]);
    let code = stop(&mut rec);
    armed?;
    if !shell_ok || outside.code != Some(0) || code != Some(0) {
        return Err(format!(
            "sh ok {shell_ok}; outside: {}; forkprof record exit {code:?}",
            outside.brief()
        ));
    }
    let ran = exec(&[FORKPROF, "report", db, "--format", "json", "--by", "cgroup"]);
    let doc: Value = serde_json::from_str(&ran.stdout)
        .map_err(|e| format!("report: not JSON: {e}: {}", ran.brief()))?;
    // Once the group had a process: the syscalls job, by the source the recording names.
    forkprof_tests::syscalls_attached(
        &doc["sources"],
        &attached,
        armed_trampolines,
        idle_trampolines,
    )
    .map_err(|e| format!("once the group had a process: {e}"))?;
    let rows = &doc["groups"]["cgroup"];
    let row = &rows[0];
    let want = (Some("/fp.service"), Some(11), Some(11), Some(11));
    let got = (
        row["binary"].as_str(),
        row["processes"].as_u64(),
        row["execs"].as_u64(),
        row["phases"]["exec"]["count"].as_u64(),
    );
    let _ = std::fs::remove_dir(group);
    if rows.as_array().map(Vec::len) == Some(1) && got == want {
        Ok(format!(
            "idle: {} tracepoints, none hot, {idle_trampolines} fentry/fexit; armed: {} \
             tracepoints, {armed_trampolines} fentry/fexit; /fp.service: 11 processes, 11 \
             execs measured",
            idle.len(),
            attached.len()
        ))
    } else {
        Err(format!(
            "want one row (group, processes, execs, exec phases) {want:?}; got {rows}"
        ))
    }
}

/// Counts the verdicts and prints each as one `VMCHECK` line.
#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    fn say(&mut self, name: &str, verdict: &str, detail: &str) {
        match verdict {
            "PASS" => self.passed += 1,
            "FAIL" => self.failed += 1,
            _ => {}
        }
        let detail = clip(&detail.replace('\n', " | "), 1500);
        println!("VMCHECK {name} {verdict} {detail}");
    }

    fn check(&mut self, name: &str, result: Result<String, String>) {
        match result {
            Ok(d) => self.say(name, "PASS", &d),
            Err(d) => self.say(name, "FAIL", &d),
        }
    }
}

fn guest() -> i32 {
    let mut t = Tally::default();
    t.check("doctor", doctor());
    let mix = run_report(&[WORKLOAD, "mix", "50", DYN], "/tmp/mix.json");
    t.check("run-mix-151", mix.clone().and_then(|r| run_mix(&r)));
    type Check = fn(&Value) -> Result<String, String>;
    let on_mix: [(&str, Check); 3] = [
        ("phases-measured", phases_measured),
        ("invariants", invariants),
        ("lineage", lineage),
    ];
    for (name, f) in on_mix {
        match &mix {
            Ok(report) => t.check(name, f(report)),
            Err(_) => t.say(name, "SKIP", "no report (see run-mix-151)"),
        }
    }
    t.check("exit-codes", exit_codes());
    t.check("failed-exec", failed_exec());
    t.check(
        "exec-threads",
        run_report(
            &[WORKLOAD, "exec-threads", "50", DYN],
            "/tmp/exec-threads.json",
        )
        .and_then(|r| forkprof_tests::check_exec_threads(&r, 50, DYN)),
    );
    t.check(
        "vfork-killed",
        run_report(&[WORKLOAD, "vfork-killed"], "/tmp/vfork-killed.json")
            .and_then(|r| forkprof_tests::check_vfork_killed(&r)),
    );
    t.check(
        "exec-paths",
        run_report(
            &[WORKLOAD, "exec-paths", "/tmp/fp-exec-paths", DYN],
            "/tmp/exec-paths.json",
        )
        .and_then(|r| {
            // The workload's line, which forkprof run passed through to exec's stdout file.
            let truth = std::fs::read_to_string("/tmp/vmcheck.out").unwrap_or_default();
            forkprof_tests::check_exec_paths(&r, truth.lines().next().unwrap_or(""))
        }),
    );
    t.check("ia32", ia32(&[]));
    t.check("ia32-tracepoints", ia32(&["FORKPROF_TEST_NO_FENTRY=1"]));
    t.check("no-ia32-syscalls", no_ia32_syscalls(&[]));
    t.check(
        "ia32-on-demand-events",
        ia32_on_demand(&["FORKPROF_TEST_NO_FENTRY=1"]),
    );
    t.check(
        "ia32-on-demand-detach",
        ia32_on_demand_detach(&["FORKPROF_TEST_NO_FENTRY=1"]),
    );
    t.check(
        "no-ia32-syscalls-events",
        no_ia32_syscalls(&["FORKPROF_TEST_NO_FENTRY=1"]),
    );
    t.check("static-start", static_start());
    t.check("cow", cow(&[]));
    t.check("pagetable-copy", pagetable_copy(&[]));
    // The kprobe sources, which these kernels never choose while fentry attaches.
    const NO_FENTRY: &[&str] = &["FORKPROF_TEST_NO_FENTRY=1"];
    t.check("cow-kprobe", cow(NO_FENTRY));
    t.check("pagetable-copy-kprobe", pagetable_copy(NO_FENTRY));
    t.check("record-report", record_report());
    t.check("cgroup-scope", cgroup_scope());
    // The host's own test binaries that xtask put in /fp/deps, run whole in this kernel.
    let mut host_tests: Vec<_> = std::fs::read_dir("/fp/deps")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    host_tests.sort();
    for path in host_tests {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        t.check(&format!("host-tests-{name}"), host_tests_pass(&path));
    }
    // Last: it unmounts tracefs and debugfs, which the checks above may read.
    t.check("tracefs-mount", tracefs_mount());
    println!("VMCHECK-DONE passed={} failed={}", t.passed, t.failed);
    i32::from(t.failed > 0)
}

/// Where tracefs is mounted nowhere, forkprof mounts it at /sys/kernel/tracing to attach
/// the classic syscall events (here with fentry refused by the test switch), and leaves it
/// mounted. The guest's init mounted tracefs and debugfs (whose `tracing` directory mounts
/// tracefs again when looked at): both go first.
fn tracefs_mount() -> Result<String, String> {
    let tracefs_mounts = || {
        std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.split_whitespace().nth(2) == Some("tracefs"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for dir in [
        "/sys/kernel/debug/tracing",
        "/sys/kernel/debug",
        "/sys/kernel/tracing",
    ] {
        let _ = std::process::Command::new("umount").arg(dir).output();
    }
    let left = tracefs_mounts();
    if !left.is_empty() {
        return Err(format!("tracefs still mounted before the run: {left:?}"));
    }
    let report = run_report_with(&["FORKPROF_TEST_NO_FENTRY=1"], &[DYN], "/tmp/tracefs.json")?;
    let fork = report["sources"]["fork"].as_str().unwrap_or("");
    if !fork.starts_with(forkprof_tests::SYSCALL_EVENTS_SOURCE) {
        return Err(format!(
            "fork from {fork:?} (want the classic syscall events)"
        ));
    }
    let execs = report["summary"]["execs"].as_u64().unwrap_or(0);
    if execs == 0 {
        return Err("no exec timed".into());
    }
    let mounted = tracefs_mounts();
    if !mounted
        .iter()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/kernel/tracing"))
    {
        return Err(format!(
            "tracefs not mounted at /sys/kernel/tracing after the run: {mounted:?}"
        ));
    }
    Ok(format!("{execs} exec timed; then: {}", mounted.join("; ")))
}

/// Runs a host test binary whole (one test at a time, as `cargo xtask test` does): it
/// passes when every test passes, and at least one ran.
fn host_tests_pass(path: &std::path::Path) -> Result<String, String> {
    let path = path.to_string_lossy();
    let ran = exec_within(&[&path, "--test-threads", "1"], HOST_TESTS_TIMEOUT);
    let out = format!("{}\n{}", ran.stdout, ran.stderr);
    let result = out
        .lines()
        .find_map(|l| l.strip_prefix("test result: "))
        .unwrap_or("no test result");
    let passed = result
        .split_once(" passed")
        .and_then(|(head, _)| head.rsplit(' ').next()?.parse::<u32>().ok())
        .unwrap_or(0);
    if ran.code == Some(0) && result.starts_with("ok") && passed > 0 {
        return Ok(result.to_string());
    }
    // What failed and why: the failures section, which names each test and its panic.
    let failures = out.find("failures:").map_or("", |i| &out[i..]);
    Err(format!("{}; {result}; {failures}", ran.what))
}

/// Markdown table of phase sources; `columns` are LABEL=FILE, FILE a doctor JSON (or absent).
fn support_table(columns: &[String]) -> i32 {
    let docs: Vec<(String, Option<Value>)> = columns
        .iter()
        .map(|c| {
            let (label, path) = c.split_once('=').unwrap_or((c, ""));
            (
                label.to_string(),
                read_json(path).ok().filter(Value::is_object),
            )
        })
        .collect();
    let mut phases: Vec<String> = PHASE_ORDER.iter().map(|p| p.to_string()).collect();
    let mut extra: Vec<String> = docs
        .iter()
        .filter_map(|(_, d)| d.as_ref()?["phases"].as_object())
        .flat_map(|m| m.keys().cloned())
        .filter(|p| !phases.contains(p))
        .collect();
    extra.sort();
    extra.dedup();
    phases.extend(extra);
    phases.retain(|p| {
        docs.iter()
            .any(|(_, d)| d.as_ref().is_some_and(|d| !d["phases"][p].is_null()))
    });
    // Sources in full; a "not measured" reason shortened.
    let cell = |s: &str| match not_measured(s) {
        Some(_) => clip(s, 80).replace('|', "\\|"),
        None => s.replace('|', "\\|"),
    };
    let mut header = "| phase |".to_string();
    for (label, doc) in &docs {
        let release = doc
            .as_ref()
            .and_then(|d| d["kernel"].as_str())
            .unwrap_or("no data");
        header.push_str(&format!(" {label} ({}) |", cell(release)));
    }
    println!("{header}");
    println!("|---|{}", "---|".repeat(docs.len()));
    for phase in &phases {
        let mut row = format!("| `{phase}` |");
        for (_, doc) in &docs {
            let text = doc
                .as_ref()
                .and_then(|d| d["phases"][phase].as_str())
                .unwrap_or("—");
            row.push_str(&format!(" {} |", cell(text)));
        }
        println!("{row}");
    }
    0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        None => guest(),
        Some("support-table") => support_table(&args[1..]),
        // On the host, for the guest's /fp (xtask vm-test).
        Some(fixture @ ("build-spawn32" | "build-wait32")) if args.len() == 2 => {
            let out = std::path::Path::new(&args[1]);
            let built = if fixture == "build-spawn32" {
                forkprof_tests::build_spawn32(out)
            } else {
                forkprof_tests::build_wait32(out)
            };
            match built {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("fp-vmcheck: {e}");
                    1
                }
            }
        }
        Some(other) => {
            eprintln!(
                "fp-vmcheck: unknown command {other} (none, support-table LABEL=FILE..., or \
                 build-spawn32 PATH, or build-wait32 PATH)"
            );
            2
        }
    };
    std::process::exit(code);
}
