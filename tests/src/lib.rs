//! Helpers for forkprof's end-to-end tests. Most of these tests load the real eBPF programs
//! into the running kernel and trace real processes, so they need root. Like aya's integration
//! tests, such a test started without root prints one line saying why and returns (it passes:
//! Rust's test harness has no runtime skip), so that a plain `cargo test` works anywhere.
//! `cargo xtask test` runs them as root and sets `FORKPROF_REQUIRE_ROOT=1`: there a missing
//! root fails the test, so CI never skips silently.
use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

/// target/<profile>/, found from the test binary's own path (target/<profile>/deps/...).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test binary in target/<profile>/deps")
        .to_path_buf()
}

pub fn forkprof() -> PathBuf {
    let p = target_dir().join("forkprof");
    assert!(
        p.exists(),
        "{} missing: build the workspace first",
        p.display()
    );
    p
}

pub fn workload() -> PathBuf {
    target_dir().join("fp-workload")
}

/// Whether this process runs as root (effective uid 0).
pub fn has_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether a test that needs root must fail rather than skip without it:
/// `FORKPROF_REQUIRE_ROOT` is set to anything but empty or `0` (`cargo xtask test` sets 1).
pub fn root_required() -> bool {
    std::env::var_os("FORKPROF_REQUIRE_ROOT").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Proof that the test runs as root, from [`root_or_skip`].
#[derive(Clone, Copy, Debug)]
pub struct Root(());

/// `Some` when the test runs as root. Otherwise, under `FORKPROF_REQUIRE_ROOT=1` it panics;
/// without it, it prints `skipped: <test>: needs root <why> ...` once and returns `None`, and
/// the test returns. The line goes straight to stderr, past the harness's output capture, so
/// that a skip shows in a plain `cargo test`. Tests use [`needs_root!`].
#[must_use = "the test must return when this is None"]
pub fn root_or_skip(test: &str, why: &str) -> Option<Root> {
    if has_root() {
        return Some(Root(()));
    }
    assert!(
        !root_required(),
        "{test}: needs root {why}, and FORKPROF_REQUIRE_ROOT is set: run it as root (cargo xtask test does)"
    );
    let line = format!("skipped: {test}: needs root {why} (cargo xtask test runs it as root)\n");
    // One write, so that lines of tests running in parallel do not mix.
    let _ = std::io::stderr().write_all(line.as_bytes());
    None
}

/// The path of the function this expands in, e.g. `run::threads_are_counted_apart`.
#[macro_export]
macro_rules! function_name {
    () => {{
        fn f() {}
        let name = ::std::any::type_name_of_val(&f);
        name.strip_suffix("::f").unwrap_or(name)
    }};
}

/// First line of a test that needs root: without root it prints why it skips and returns from
/// the test (see [`root_or_skip`]). `needs_root!()` is for tests that load eBPF programs;
/// `needs_root!("to ...")` gives another reason.
#[macro_export]
macro_rules! needs_root {
    () => {
        $crate::needs_root!("to load eBPF programs")
    };
    ($why:expr) => {
        if $crate::root_or_skip($crate::function_name!(), $why).is_none() {
            return;
        }
    };
}

pub struct Run {
    pub output: Output,
    pub report: Value,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn summary(&self, key: &str) -> u64 {
        self.report["summary"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("summary.{key} missing in {}", self.report))
    }

    pub fn method(&self, name: &str) -> u64 {
        self.report["methods"][name].as_u64().unwrap_or(0)
    }

    /// Every exec attempt of every process: (path, errno).
    pub fn exec_attempts(&self) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for p in self.report["processes"].as_array().expect("processes") {
            for e in p["execs"].as_array().expect("execs") {
                out.push((
                    e["path"].as_str().unwrap_or_default().to_string(),
                    e["errno"].as_i64().unwrap_or(-1),
                ));
            }
        }
        out
    }
}

/// `forkprof run --json --report <tmp> -- cmd...`, returning its output and parsed report.
pub fn run_traced(cmd: &[&str], configure: impl FnOnce(&mut Command)) -> Run {
    run_traced_with(&[], cmd, configure)
}

/// As `run_traced`, with extra `forkprof run` flags.
pub fn run_traced_with(flags: &[&str], cmd: &[&str], configure: impl FnOnce(&mut Command)) -> Run {
    assert!(
        has_root(),
        "forkprof run needs root: start the test with forkprof_tests::needs_root!()"
    );
    let dir = tempdir();
    let report_path = dir.join("report.json");
    let mut c = Command::new(forkprof());
    c.args(["run", "--json", "--report"])
        .arg(&report_path)
        .args(flags)
        .arg("--")
        .args(cmd);
    configure(&mut c);
    let output = c.output().expect("start forkprof");
    let report = std::fs::read_to_string(&report_path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
    Run { output, report }
}

/// Runs gcc with `args` in `dir` (the fixtures are C; `cargo xtask setup` installs gcc).
pub fn gcc(dir: &std::path::Path, args: &[&str]) {
    let st = Command::new("gcc")
        .current_dir(dir)
        .args(args)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc {args:?}");
}

/// A fresh private directory under /tmp.
pub fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "forkprof-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// The ids of the BPF programs named `forkprof_*` loaded in the kernel now (bpftool), whoever
/// loaded them.
pub fn forkprof_programs() -> BTreeSet<u32> {
    forkprof_program_names().into_keys().collect()
}

/// The BPF programs named `forkprof_*` loaded in the kernel now, by id, with their names
/// (one `bpftool prog show`).
pub fn forkprof_program_names() -> std::collections::BTreeMap<u32, String> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool");
    let progs: Value = serde_json::from_slice(&out.stdout).expect("bpftool prog show --json");
    progs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p["name"].as_str().filter(|n| n.starts_with("forkprof_"))?;
            Some((p["id"].as_u64()? as u32, name.to_string()))
        })
        .collect()
}

/// The ids of the BPF programs that process `pid` holds now, through its program and link
/// fds (their fdinfo's `prog_id:`): an agent's own programs, not another agent's.
pub fn programs_of(pid: u32) -> BTreeSet<u32> {
    fdinfo_values(pid, "prog_id:")
        .iter()
        .filter_map(|id| id.parse().ok())
        .collect()
}

/// Waits (up to 10 s) until the kernel has freed every program in `ids` (from `programs_of`,
/// taken while their agent ran), and fails the test otherwise. Programs of another forkprof,
/// on the host or in a test running beside, do not count; nor does a program the agent no
/// longer held an fd to (`wait_unloaded_since` sees those, under a lock).
pub fn wait_unloaded(ids: &BTreeSet<u32>) {
    assert!(!ids.is_empty(), "no programs to wait for");
    wait_until_freed(|id| ids.contains(&id));
}

/// Waits (up to 10 s) until every `forkprof_*` program loaded is one of `before` (from
/// `forkprof_programs`, taken before the agent started), and fails the test otherwise. This
/// also catches a program that its agent no longer held an fd to, but another agent started
/// meanwhile counts too: for tests that hold the `exclusive` lock (tests/tests/hardening.rs).
pub fn wait_unloaded_since(before: &BTreeSet<u32>) {
    wait_until_freed(|id| !before.contains(&id));
}

fn wait_until_freed(ours: impl Fn(u32) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<u32> = forkprof_programs()
            .into_iter()
            .filter(|&id| ours(id))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "forkprof programs still loaded after 10 s: ids {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// How long a test waits for forkprof to be ready: its programs loaded and attached, its
/// first line or its endpoint up. Seconds on the test VM; over 30 s in a qemu guest under
/// TCG on a slow host (`cargo xtask vm-test` runs cgroups.rs there). A longer wait costs
/// nothing when things work, and a hang still fails.
pub const READY: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits (up to `READY`) until process `parent` has a child whose comm is `comm` (the
/// command `forkprof run` started, once the programs are attached), and returns that
/// child's pid.
pub fn wait_for_child(parent: u32, comm: &str) -> String {
    let deadline = std::time::Instant::now() + READY;
    loop {
        let kids = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(pid) = kids.split_whitespace().next()
            && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        {
            return pid.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "{comm} never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Asserts that a command exited 0, showing its exit and stderr if not.
pub fn succeeded(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status.code());
}

/// Waits (up to 30 s) until `child` (a `forkprof record` started with its stderr piped)
/// says that tracing has started ("forkprof: recording ..."), so that a workload started
/// next is traced whatever the machine's speed. Its stderr is drained from then on, in a
/// thread, so the pipe never fills.
pub fn wait_until_recording(child: &mut std::process::Child) {
    wait_until_ready(child, "forkprof: recording");
}

/// The child's stderr (piped), line by line, read on a thread of its own.
pub fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// `wait_until_recording` for any agent: until a line of its stderr starts with `ready`
/// (`record`'s "forkprof: recording", `monitor`'s "forkprof: serving metrics"), which it
/// prints once every program is loaded and attached.
pub fn wait_until_ready(child: &mut std::process::Child, ready: &'static str) {
    use std::io::BufRead as _;
    let stderr = child.stderr.take().expect("the agent's stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.starts_with(ready) {
                let _ = tx.send(Ok(()));
            } else {
                said.push(line);
            }
        }
        let _ = tx.send(Err(said.join("\n")));
    });
    match rx.recv_timeout(READY) {
        Ok(Ok(())) => {}
        Ok(Err(said)) => panic!("the agent ended before saying {ready:?}: {said}"),
        Err(_) => panic!("the agent did not say {ready:?} within {READY:?}"),
    }
}

/// The cgroup2 mount (`/sys/fs/cgroup/unified` on a hybrid host like the test VM,
/// `/sys/fs/cgroup` on a pure v2 one).
pub fn cgroup2() -> PathBuf {
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

/// Real cgroup v2 groups made by one test, under `forkprof-TEST-PID`, removed (once empty)
/// when dropped.
pub struct Groups {
    top: PathBuf,
    made: Vec<PathBuf>,
}

impl Groups {
    pub fn new(test: &str) -> Self {
        let top = cgroup2().join(format!("forkprof-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&top).unwrap();
        Self {
            top: top.clone(),
            made: vec![top],
        }
    }

    /// Makes `name` (`a` or `a/b`) below the test's group.
    pub fn make(&mut self, name: &str) -> PathBuf {
        let mut dir = self.top.clone();
        for part in name.split('/') {
            dir.push(part);
            if !self.made.contains(&dir) {
                std::fs::create_dir_all(&dir).unwrap();
                self.made.push(dir.clone());
            }
        }
        dir
    }

    /// `name`'s path (below the test's group) as forkprof shows it.
    pub fn shown(&self, name: &str) -> String {
        shown_cgroup(&self.top.join(name))
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        for dir in self.made.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A cgroup directory's path as forkprof shows it (below the cgroup2 mount).
pub fn shown_cgroup(dir: &std::path::Path) -> String {
    format!("/{}", dir.strip_prefix(cgroup2()).unwrap().display())
}

/// `sh -c` moving itself into `group`, then exec'ing `cmd`.
pub fn in_group(group: &std::path::Path, cmd: &str) -> String {
    format!(
        "sh -c 'echo $$ > {}/cgroup.procs && exec {cmd}'",
        group.display()
    )
}

/// Polls `check` every 200 ms until it gives a value, for at most `timeout`; fails the test
/// naming `what` when it never does.
pub fn wait_for<T>(
    what: &str,
    timeout: std::time::Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A child process that is killed (SIGKILL) and reaped when dropped, so that a failing test
/// leaves no `forkprof monitor` or Prometheus server behind. `.0` is the child, for a test
/// that stops it itself.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process that lives in cgroup `dir` until dropped (as a service's idle main process
/// would), once the group says it is populated: a `record --cgroup` of the group attaches
/// its hot hooks at the start.
pub fn resident_in(dir: &Path) -> Killed {
    let resident = Killed(
        Command::new("sh")
            .args([
                "-c",
                &format!("echo $$ > {}/cgroup.procs && exec sleep 600", dir.display()),
            ])
            .spawn()
            .unwrap(),
    );
    wait_for(
        "the group to have a process",
        std::time::Duration::from_secs(30),
        || {
            std::fs::read_to_string(dir.join("cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l == "populated 1"))
                .then_some(())
        },
    );
    resident
}

/// As [`Killed`], but stopped with SIGTERM, which a child can act on: `strace` ends its
/// tracee with it, and a `forkprof monitor` that a shell exec'd into receives it itself.
pub struct Terminated(pub Child);

impl Drop for Terminated {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// A TCP port on 127.0.0.1 that the kernel found free a moment ago (it picks one for port
/// 0), for a server the test starts. Something else could take it before the server does;
/// on a test machine nothing does.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `forkprof monitor --listen 127.0.0.1:PORT FLAGS...`, its stderr discarded, killed when
/// dropped. Its /metrics answers once its programs are attached: wait for [`scrape`].
pub fn monitor(port: u16, flags: &[&str]) -> Killed {
    Killed(
        Command::new(forkprof())
            .args(["monitor", "--listen", &format!("127.0.0.1:{port}")])
            .args(flags)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// What `curl -sf --max-time 5 ARGS...` prints, or `None` when it fails: no server (yet),
/// an HTTP error, or no answer within 5 s. The tests poll the servers they start with it.
pub fn curl(args: &[&str]) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5"])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The body of http://127.0.0.1:PORT/metrics (a `forkprof monitor`'s), if it answers.
pub fn scrape(port: u16) -> Option<String> {
    curl(&[&format!("http://127.0.0.1:{port}/metrics")])
}

/// A real Prometheus server on a free port that scrapes 127.0.0.1:`target` every second,
/// its data under `dir`, killed when dropped; returns once it has scraped the target
/// (`up` is 1, within 30 s), with its port for [`query`].
pub fn prometheus(dir: &Path, target: u16) -> (Killed, u16) {
    let port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: forkprof\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
        ),
    )
    .unwrap();
    let server = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (cargo xtask setup installs it)"),
    );
    wait_for(
        "prometheus to scrape forkprof",
        std::time::Duration::from_secs(30),
        || query(port, "up{job=\"forkprof\"}").filter(|&v| v == 1.0),
    );
    (server, port)
}

/// The value of the PromQL instant query `q` on the Prometheus server at 127.0.0.1:`prom`,
/// if it gives exactly one series: none means no data yet, and more would make "the" value
/// a matter of which came first.
pub fn query(prom: u16, q: &str) -> Option<f64> {
    let url = format!("http://127.0.0.1:{prom}/api/v1/query");
    let body = curl(&["-G", &url, "--data-urlencode", &format!("query={q}")])?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

/// A detached tmux session running a bare bash in a `width` x 50 terminal, killed when
/// dropped: `top`'s TUI needs a real terminal, and tmux lets the test type into it and read
/// its screen.
pub struct Tmux {
    session: String,
}

impl Tmux {
    /// Starts session `NAME-PID` (the pid keeps tests run side by side apart).
    pub fn new(name: &str, width: u32) -> Self {
        let session = format!("{name}-{}", std::process::id());
        let st = Command::new("tmux")
            .args(["new-session", "-d", "-s", &session, "-x"])
            .arg(width.to_string())
            .args(["-y", "50", "bash --norc --noprofile"])
            .status()
            .unwrap();
        assert!(st.success());
        Self { session }
    }

    /// Types `keys`, as `tmux send-keys` spells them (`Enter`, or text).
    pub fn keys(&self, keys: &[&str]) {
        let st = Command::new("tmux")
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// The text on the screen now.
    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Makes the terminal `width` columns wide (the program sees SIGWINCH).
    pub fn resize(&self, width: u32) {
        let st = Command::new("tmux")
            .args(["resize-window", "-t", &self.session, "-x"])
            .arg(width.to_string())
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Whether the terminal shows its alternate screen (a full-screen program is running).
    pub fn alternate_screen(&self) -> bool {
        let out = Command::new("tmux")
            .args([
                "display-message",
                "-p",
                "-t",
                &self.session,
                "#{alternate_on}",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .status();
    }
}

/// The tracepoints that process `pid` holds BPF links to, sorted (from its fds' fdinfo
/// `tp_name:` lines; an fd that is gone or unreadable is left out).
pub fn attached_tracepoints(pid: u32) -> Vec<String> {
    let mut names = fdinfo_values(pid, "tp_name:");
    names.sort();
    names
}

/// The value of the `key` line (`tp_name:`, `map_id:`) in the fdinfo of each of process
/// `pid`'s fds that has one (an fd that is gone or unreadable is left out).
fn fdinfo_values(pid: u32, key: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        })
        .collect()
}

/// How many fentry/fexit links (link type `tracing`) process `pid` holds, from its fds'
/// fdinfo. Their fdinfo names no function, only its BTF id.
pub fn attached_trampolines(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter(|info| {
            info.lines()
                .any(|l| l.strip_prefix("link_type:").map(str::trim) == Some("tracing"))
        })
        .count()
}

/// The hooks of the syscalls job's fentry/fexit source (`loader::SYSCALL_FUNCTIONS`): 19 for
/// x86-64 syscalls and 9 for ia32 ones, on a kernel with CONFIG_IA32_EMULATION.
pub const SYSCALL_FUNCTION_HOOKS: usize = 28;

/// How a recording's `sources` names the syscalls job where it hooks the syscall
/// functions (where trampolines attach), and where it hooks the `sys_enter` and `sys_exit`
/// tracepoints instead (where they are refused, as under lockdown).
pub const SYSCALL_FUNCTIONS_SOURCE: &str = "fentry/fexit __x64_sys_*";
pub const SYSCALL_TRACEPOINTS_SOURCE: &str = "tp_btf sys_enter + tp_btf sys_exit";
/// Its source where trampolines are refused, by default (`--ia32-syscalls on-demand`, and
/// `never`): the classic per-syscall events.
pub const SYSCALL_EVENTS_SOURCE: &str = "tracepoint syscalls:sys_{enter,exit}_*";

/// Whether the syscalls job is attached by the source that a recording's `sources` name
/// (`forkprof report --format json`'s `sources`), and by that one only: the `sys_enter` and
/// `sys_exit` tracepoints (`tracepoints`, from `attached_tracepoints`) and fewer than
/// `SYSCALL_FUNCTION_HOOKS` new fentry/fexit links, or `SYSCALL_FUNCTION_HOOKS` more links
/// (`trampolines`, of which `before` were there already) and neither tracepoint, or the
/// classic syscall events and neither. `Err` says what was found.
pub fn syscalls_attached(
    sources: &Value,
    tracepoints: &[String],
    trampolines: usize,
    before: usize,
) -> Result<(), String> {
    let exec = sources["exec"].as_str().unwrap_or("");
    let by_tracepoints = ["sys_enter", "sys_exit"].map(|h| tracepoints.iter().any(|t| t == h));
    let by_functions = trampolines >= before + SYSCALL_FUNCTION_HOOKS;
    if exec.starts_with(SYSCALL_EVENTS_SOURCE) {
        // The classic events (whose links name no tracepoint in their fdinfo), and no
        // syscall function; sys_enter and sys_exit only once attached on demand for a
        // 32-bit process, else in standby.
        let on_demand = exec.contains("attached when the first was seen");
        if by_tracepoints == [on_demand; 2] && trampolines < before + SYSCALL_FUNCTION_HOOKS {
            return Ok(());
        }
        return Err(format!(
            "exec from {exec:?}, but sys_enter/sys_exit attached {by_tracepoints:?} \
             ({tracepoints:?}) and {trampolines} fentry/fexit links, {before} before"
        ));
    }
    let want_tracepoints = if exec.contains(SYSCALL_TRACEPOINTS_SOURCE) {
        true
    } else if exec.contains(SYSCALL_FUNCTIONS_SOURCE) {
        false
    } else {
        return Err(format!(
            "the recording names no syscalls source: exec from {exec:?}"
        ));
    };
    if by_tracepoints == [want_tracepoints; 2] && by_functions != want_tracepoints {
        return Ok(());
    }
    Err(format!(
        "exec from {exec:?}, but sys_enter/sys_exit attached {by_tracepoints:?} ({tracepoints:?}) \
         and {trampolines} fentry/fexit links, {before} before ({SYSCALL_FUNCTION_HOOKS} more \
         is the syscall functions' source)"
    ))
}

/// The `sources` of recording `db` (`forkprof report --format json`): for each phase, the
/// hooks that measured it.
pub fn recorded_sources(db: &Path) -> Value {
    let out = Command::new(forkprof())
        .args(["report", "--format", "json"])
        .arg(db)
        .output()
        .unwrap();
    succeeded(&out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["sources"].clone()
}

/// The raw tracepoints forkprof hooks that fire on every syscall, user page fault or
/// mmap-lock event of every task (page_fault_user only where do_wp_page cannot be hooked,
/// the mmap-lock pair only where no better source of pagetable_copy attaches).
pub const HOT_TRACEPOINTS: &[&str] = &[
    "sys_enter",
    "sys_exit",
    "page_fault_user",
    "mmap_lock_acquire_returned",
    "mmap_lock_released",
];

/// The path a `spawn32` fixture's last child fails to exec (tests/fixtures/spawn32.c).
pub const SPAWN32_MISSING: &str = "/nonexistent/fp-spawn32";

/// Builds tests/fixtures/spawn32.c, a 32-bit process that spawns through the ia32 syscall
/// table only, into `out` (gcc -m32 without a libc: any gcc with 32-bit code generation).
pub fn build_spawn32(out: &Path) -> Result<(), String> {
    build_32_bit("spawn32.c", out)
}

/// Builds tests/fixtures/wait32.c, a 32-bit process that sleeps a second and then execs its
/// first argument (a 32-bit program), at `out`.
pub fn build_wait32(out: &Path) -> Result<(), String> {
    build_32_bit("wait32.c", out)
}

/// Builds the 32-bit fixture `name` (no libc) at `out`.
fn build_32_bit(name: &str, out: &Path) -> Result<(), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    let built = Command::new("gcc")
        .args([
            "-m32",
            "-O1",
            "-static",
            "-nostdlib",
            "-fno-pic",
            "-fno-stack-protector",
            "-o",
        ])
        .arg(out)
        .arg(&src)
        .output()
        .map_err(|e| format!("gcc: {e}"))?;
    if built.status.success() {
        Ok(())
    } else {
        Err(format!(
            "gcc -m32 {}: {}",
            src.display(),
            String::from_utf8_lossy(&built.stderr)
        ))
    }
}

/// The processes in `report` whose parent is the process of binary `path`; `Err` when the
/// report has no process of `path`.
pub fn children_of<'a>(report: &'a Value, path: &str) -> Result<Vec<&'a Value>, String> {
    let procs = report["processes"].as_array().ok_or("no processes array")?;
    let parent = procs
        .iter()
        .find(|p| p["binary"] == path)
        .ok_or_else(|| format!("no process of {path}"))?;
    Ok(procs
        .iter()
        .filter(|p| p["parent_pid"] == parent["pid"])
        .collect())
}

/// Checks forkprof's report (of a run, or of a recording with `--processes`) of one run of
/// the `spawn32` fixture at `path`: its four children, made by ia32 fork, clone(SIGCHLD),
/// vfork and fork, each with its parent, method and fork time; three exec `true`
/// (/bin/true, 64-bit), and the last fails to exec `SPAWN32_MISSING` (ENOENT, timed as
/// exec_failed, its path and argv read from the 32-bit caller) and exits 127.
/// Returns a one-line summary, or what is wrong.
pub fn check_spawn32(report: &Value, path: &str) -> Result<String, String> {
    let mut kids = children_of(report, path)?;
    // In the order they were made (a recording's report lists processes in another).
    kids.sort_by_key(|p| p["start_ns"].as_u64());
    let summary: Vec<String> = kids
        .iter()
        .map(|p| {
            let execs: Vec<String> = p["execs"]
                .as_array()
                .map(|e| {
                    e.iter()
                        .map(|x| format!("{} errno {}", x["path"], x["errno"]))
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "{} {} [{}] exit {} fork {}",
                p["pid"],
                p["method"],
                execs.join(", "),
                p["exit"]["code"],
                p["phases"]["fork"]
            )
        })
        .collect();
    let detail = summary.join("; ");
    let mut bad = Vec::new();
    if kids.len() != 4 {
        bad.push(format!("{} children of {path} (want 4)", kids.len()));
    }
    let methods: Vec<&str> = kids.iter().filter_map(|p| p["method"].as_str()).collect();
    if methods != ["fork", "fork", "vfork", "fork"] {
        bad.push(format!(
            "methods {methods:?} (want fork, fork (clone), vfork, fork)"
        ));
    }
    for (i, p) in kids.iter().enumerate() {
        if !p["phases"]["fork"].as_f64().is_some_and(|ns| ns > 0.0) {
            bad.push(format!("child {i}: no fork time"));
        }
        let execs = p["execs"].as_array().cloned().unwrap_or_default();
        let want_fail = i == 3;
        let ok = match execs.as_slice() {
            [e] if want_fail => {
                e["path"] == SPAWN32_MISSING
                    && e["args"] == serde_json::json!([SPAWN32_MISSING])
                    && e["argc"] == 1
                    && e["errno"] == 2
                    && p["exit"]["code"] == 127
                    && p["phases"]["exec_failed"]
                        .as_f64()
                        .is_some_and(|ns| ns > 0.0)
            }
            [e] => {
                e["errno"] == 0
                    && e["path"].as_str().is_some_and(|s| s.ends_with("/true"))
                    && p["phases"]["exec"].as_f64().is_some_and(|ns| ns > 0.0)
            }
            _ => false,
        };
        if !ok {
            bad.push(format!(
                "child {i}: execs {execs:?}, phases {}",
                p["phases"]
            ));
        }
    }
    if bad.is_empty() {
        Ok(detail)
    } else {
        Err(format!("{}; {detail}", bad.join("; ")))
    }
}

/// `fp-workload exec-threads COUNT PROGRAM`, traced: both threads' `2 * count` failing execs
/// of /nonexistent/fp-exec-both each recorded (ENOENT), the racing thread's failures of
/// /nonexistent/fp-exec-race recorded as ENOENT only (its attempt cut short by the main
/// thread's exec is not a failure: the kernel returns a restart code to a dying thread), and
/// the main thread's exec of `program` recorded once. Returns a one-line summary, or what is
/// wrong.
pub fn check_exec_threads(report: &Value, count: u64, program: &str) -> Result<String, String> {
    let mut attempts = Vec::new();
    for p in report["processes"].as_array().ok_or("no processes array")? {
        for e in p["execs"].as_array().ok_or("no execs array")? {
            attempts.push((
                e["path"].as_str().unwrap_or_default().to_string(),
                e["errno"].as_i64().unwrap_or(-1),
            ));
        }
    }
    let (both, race) = ("/nonexistent/fp-exec-both", "/nonexistent/fp-exec-race");
    let of = |path: &str| -> Vec<i64> {
        attempts
            .iter()
            .filter(|(p, _)| p == path)
            .map(|&(_, errno)| errno)
            .collect()
    };
    let (both_errnos, race_errnos) = (of(both), of(race));
    let not_enoent = both_errnos
        .iter()
        .chain(&race_errnos)
        .filter(|&&e| e != 2)
        .count();
    let succeeded = of(program).iter().filter(|&&e| e == 0).count();
    let failed = report["summary"]["failed_execs"].as_u64();
    let (n_both, n_race) = (both_errnos.len() as u64, race_errnos.len() as u64);
    let detail = format!(
        "{n_both} of {both}, {n_race} of {race}, {not_enoent} not ENOENT, {succeeded} exec of {program}, failed_execs {failed:?}"
    );
    if n_both == 2 * count
        && n_race >= 10
        && not_enoent == 0
        && succeeded == 1
        && failed == Some(n_both + n_race)
    {
        Ok(detail)
    } else {
        Err(format!(
            "want {} of {both}, >= 10 of {race}, all ENOENT, one exec of {program}; {detail}",
            2 * count
        ))
    }
}

/// How long each vfork child of `fp-workload vfork-killed` sleeps before it exits, in ns.
pub const VFORK_KILLED_CHILD_SLEEP_NS: f64 = 1e9;

/// Checks a `forkprof run --json` report of `fp-workload vfork-killed`: four processes, each
/// killed (by exit_group, or by another thread's exec) while one of its threads, the main one
/// or another, waited inside vfork for a child that sleeps `VFORK_KILLED_CHILD_SLEEP_NS`. The
/// vfork syscall still returns in the dying thread, so each of the four vforks is recorded,
/// and its `vfork_wait` ends there: shorter than the child's sleep, which it would span had
/// the window closed only at the child's exit. Returns a one-line summary, or what is wrong.
pub fn check_vfork_killed(report: &Value) -> Result<String, String> {
    let waits: Vec<Option<f64>> = report["processes"]
        .as_array()
        .ok_or("no processes array")?
        .iter()
        .filter(|p| p["method"] == "vfork")
        .map(|p| p["phases"]["vfork_wait"].as_f64())
        .collect();
    let ms: Vec<String> = waits
        .iter()
        .map(|w| w.map_or("none".into(), |ns| format!("{:.0}", ns / 1e6)))
        .collect();
    let detail = format!("{} vforks, vfork_wait [{}] ms", waits.len(), ms.join(", "));
    let ended_at_the_kill = waits
        .iter()
        .all(|w| w.is_some_and(|ns| ns > 0.0 && ns < VFORK_KILLED_CHILD_SLEEP_NS));
    if waits.len() == 4 && ended_at_the_kill {
        Ok(detail)
    } else {
        Err(format!(
            "want 4 vforks, each vfork_wait above 0 and under the child's {} ms sleep; {detail}",
            VFORK_KILLED_CHILD_SLEEP_NS / 1e6
        ))
    }
}

/// Checks a `forkprof run --json` report of `fp-workload exec-paths DIR PROGRAM` against the
/// workload's own line (`truth`: each case's absolute binary path and errno, as the workload
/// resolved them): each exec whose argv[0] is `fp-path-CASE` is shown with that path and
/// errno (a relative path made absolute against its directory, `/dev/fd/N` and
/// `/proc/self/exe` as the file they name, a memfd as `/memfd:NAME`, a path deeper than the
/// kernel walks as `…/` and its last names), and the binaries table keeps `DIR/a/t` and
/// `DIR/b/t` apart (three execs and two). Returns a one-line summary, or what is wrong.
pub fn check_exec_paths(report: &Value, truth: &str) -> Result<String, String> {
    let truth: Value =
        serde_json::from_str(truth).map_err(|e| format!("workload line {truth:?}: {e}"))?;
    let cases = truth.as_object().ok_or("workload line is not an object")?;
    let mut shown = std::collections::BTreeMap::new();
    for p in report["processes"].as_array().ok_or("no processes array")? {
        for e in p["execs"].as_array().ok_or("no execs array")? {
            if let Some(case) = e["args"][0]
                .as_str()
                .and_then(|a| a.strip_prefix("fp-path-"))
            {
                shown.insert(
                    case.to_string(),
                    (
                        e["path"].as_str().unwrap_or_default().to_string(),
                        e["errno"].as_i64().unwrap_or(-1),
                    ),
                );
            }
        }
    }
    let mut wrong = Vec::new();
    for (case, want) in cases {
        let want = (
            want[0].as_str().unwrap_or_default().to_string(),
            want[1].as_i64().unwrap_or(-1),
        );
        match shown.get(case) {
            Some(got) if *got == want => {}
            got => wrong.push(format!("{case}: want {want:?}, shown {got:?}")),
        }
    }
    let binaries = report["groups"]["binary"]
        .as_array()
        .ok_or("no binary group")?;
    let execs_of = |suffix: &str| {
        let path = cases
            .values()
            .filter_map(|v| v[0].as_str())
            .find(|p| p.ends_with(suffix))
            .unwrap_or_default();
        binaries
            .iter()
            .find(|b| b["binary"] == path)
            .and_then(|b| b["execs"].as_u64())
    };
    let (a, b) = (execs_of("/a/t"), execs_of("/b/t"));
    if (a, b) != (Some(3), Some(2)) {
        wrong.push(format!(
            "binaries: want a/t 3 execs and b/t 2, got {a:?} and {b:?}"
        ));
    }
    if wrong.is_empty() {
        Ok(format!(
            "{} cases as the workload resolved them; a/t 3 execs, b/t 2",
            cases.len()
        ))
    } else {
        Err(wrong.join("; "))
    }
}

/// The id of the forkprof process `pid`'s `.bss` map, which holds the kernel's open-window
/// counters (`ACTIVE`). None when it has no such map.
pub fn window_counters_map(pid: u32) -> Option<String> {
    map_of(pid, ".bss")
}

/// The id of the map named `name` among those whose fds process `pid` holds (fdinfo
/// `map_id:`), by one `bpftool map show`: an agent's own map, not another agent's. None
/// when it has no such map.
pub fn map_of(pid: u32, name: &str) -> Option<String> {
    let ids = fdinfo_values(pid, "map_id:");
    let out = Command::new("bpftool")
        .args(["map", "show", "-j"])
        .output()
        .ok()?;
    let maps: Value = serde_json::from_slice(&out.stdout).ok()?;
    maps.as_array()?
        .iter()
        .filter(|m| m["name"] == name)
        .map(|m| m["id"].to_string())
        .find(|id| ids.contains(id))
}

/// The length of BPF program `id`'s own function in BPF instructions as the kernel
/// translated it (`bpftool prog dump xlated -j`: the instructions before the first
/// subprogram's prototype), and whether it calls any subprogram. None when bpftool cannot
/// dump it.
pub fn program_own_length(id: u32) -> Option<(usize, bool)> {
    let dump = Command::new("bpftool")
        .args(["prog", "dump", "xlated", "id", &id.to_string(), "-j"])
        .output()
        .ok()?;
    let insns: Value = serde_json::from_slice(&dump.stdout).ok()?;
    let insns = insns.as_array()?;
    let own = insns
        .iter()
        .skip(1)
        .position(|i| i.get("proto").is_some())
        .map_or(insns.len(), |at| at + 1);
    Some((own, own < insns.len()))
}

/// Each CPU's bytes of entry 0 of per-CPU array map `id`, by `bpftool map dump`. None when
/// bpftool cannot dump it.
pub fn per_cpu_values(id: &str) -> Option<Vec<Vec<u8>>> {
    map_dump(id)?[0]["values"]
        .as_array()?
        .iter()
        .map(|cpu| hex_bytes(&cpu["value"]))
        .collect()
}

/// The bytes of array map `id`'s entry `index`, by `bpftool map lookup`. None when bpftool
/// cannot read it.
pub fn array_value(id: &str, index: u32) -> Option<Vec<u8>> {
    let mut args = vec!["map".to_string(), "lookup".into(), "id".into(), id.into()];
    args.extend(hex_args("key", &index.to_le_bytes()));
    args.push("-j".into());
    let out = Command::new("bpftool").args(&args).output().ok()?;
    let entry: Value = serde_json::from_slice(&out.stdout).ok()?;
    hex_bytes(&entry["value"])
}

/// Writes `value` into map `id` at `key` (raw bytes), by `bpftool map update`. Panics when
/// bpftool refuses.
pub fn update_map(id: &str, key: &[u8], value: &[u8]) {
    let mut args = vec!["map".to_string(), "update".into(), "id".into(), id.into()];
    args.extend(hex_args("key", key));
    args.extend(hex_args("value", value));
    let out = Command::new("bpftool").args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "bpftool map update id {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `WHAT hex b0 b1 ...`, as bpftool takes raw bytes.
fn hex_args(what: &str, bytes: &[u8]) -> Vec<String> {
    [what.to_string(), "hex".into()]
        .into_iter()
        .chain(bytes.iter().map(|b| format!("{b:02x}")))
        .collect()
}

/// Map `id`'s entries, as `bpftool map dump -j` gives them. None when bpftool cannot dump it.
fn map_dump(id: &str) -> Option<Value> {
    let out = Command::new("bpftool")
        .args(["map", "dump", "id", id, "-j"])
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// bpftool's JSON bytes (`["0x2f", ...]`).
fn hex_bytes(bytes: &Value) -> Option<Vec<u8>> {
    bytes
        .as_array()?
        .iter()
        .map(|b| u8::from_str_radix(b.as_str()?.trim_start_matches("0x"), 16).ok())
        .collect()
}

/// The open-window counters in `.bss` map `id` ([`window_counters_map`]), in
/// `forkprof_common::active` order: FORKS, EXECS, LD, EXITS, COW, CHILDREN, SPILLED,
/// STATIC_START. None when bpftool cannot dump it.
pub fn open_window_counters(id: &str) -> Option<Vec<u64>> {
    let bytes = hex_bytes(&map_dump(id)?[0]["value"])?;
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

/// Runs `sh -c SCRIPT` and asserts that it succeeded.
pub fn sh(script: &str) {
    let status = Command::new("sh").args(["-c", script]).status().unwrap();
    assert!(status.success(), "sh -c {script:?}: {status}");
}

/// The output of `sqlite3 FILE SQL` (the shell people query recordings with), trimmed.
pub fn sqlite(file: &Path, sql: &str) -> String {
    let out = Command::new("sqlite3").arg(file).arg(sql).output().unwrap();
    assert!(
        out.status.success(),
        "sqlite3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(exec: &str) -> Value {
        serde_json::json!({ "exec": exec })
    }

    fn hooks(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn syscalls_attached_wants_the_named_source_and_only_it() {
        let tp = sources(&format!("{SYSCALL_TRACEPOINTS_SOURCE}: execve"));
        let fns = sources(&format!("{SYSCALL_FUNCTIONS_SOURCE}: execve"));
        let both = hooks(&["task_newtask", "sys_enter", "sys_exit"]);
        let none = hooks(&["task_newtask"]);
        let n = SYSCALL_FUNCTION_HOOKS;
        assert_eq!(syscalls_attached(&tp, &both, 1, 1), Ok(()));
        assert_eq!(syscalls_attached(&fns, &none, n + 1, 1), Ok(()));
        // The named source missing, in part or whole.
        assert!(syscalls_attached(&tp, &hooks(&["sys_enter"]), 1, 1).is_err());
        assert!(syscalls_attached(&fns, &none, n, 1).is_err());
        // The other source attached as well.
        assert!(syscalls_attached(&tp, &both, n + 1, 1).is_err());
        assert!(syscalls_attached(&fns, &both, n + 1, 1).is_err());
        // A recording that names neither.
        assert!(syscalls_attached(&sources("?"), &both, 0, 0).is_err());
    }
}
