//! The tools compared with bare runs: how each is started, and what it needs installed.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

pub(super) use super::workload::Workload;

/// The tools compared with bare runs, in the order of the table.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tool {
    /// the bare loop again: an A/A control that shows the noise floor
    Control,
    /// `forkprof run` (default mode)
    Forkprof,
    /// `forkprof run` with FORKPROF_BENCH_EMPTY=1: the same hooks, every program returning
    /// at entry (the floor forkprof's own work sits on)
    ForkprofEmpty,
    /// `forkprof run --precise-ld`: uprobes on ld.so's `_dl_debug_state` and libc's
    /// `__libc_start_main` bracket the dynamic linker
    ForkprofPreciseLd,
    /// `forkprof run --precise-ld` with FORKPROF_BENCH_EMPTY=1: its floor, uprobes included
    ForkprofPreciseLdEmpty,
    /// `forkprof run --ia32-syscalls always`: where trampolines are refused, sys_enter and
    /// sys_exit for every syscall instead of the classic events of the syscalls forkprof
    /// follows (the default)
    ForkprofAlways,
    /// `forkprof run --ia32-syscalls always` with FORKPROF_BENCH_EMPTY=1: its floor
    ForkprofAlwaysEmpty,
    /// `forkprof record` of the whole system, started before the loop and stopped after it
    Record,
    /// `forkprof record --cgroup` of an empty cgroup made for the bench, around the loop
    /// (which runs outside it): what a scoped recording costs the rest of the host
    RecordCgroup,
    /// `forkprof monitor` (system-wide), started before the loop and stopped after it
    Monitor,
    /// `strace -f -c -o /dev/null`
    Strace,
    /// `perf trace -s -o /dev/null`
    Perf,
    /// `bpftrace bench/phases.bt`
    Bpftrace,
}

pub(super) const ALL_TOOLS: [Tool; 13] = [
    Tool::Control,
    Tool::Forkprof,
    Tool::ForkprofEmpty,
    Tool::ForkprofPreciseLd,
    Tool::ForkprofPreciseLdEmpty,
    Tool::ForkprofAlways,
    Tool::ForkprofAlwaysEmpty,
    Tool::Record,
    Tool::RecordCgroup,
    Tool::Monitor,
    Tool::Strace,
    Tool::Perf,
    Tool::Bpftrace,
];

/// Tools that cannot run here, each with the reason.
pub(super) type Unavailable = Vec<(Tool, String)>;

impl Tool {
    pub(super) fn label(self) -> &'static str {
        match self {
            Tool::Control => "bare again (A/A)",
            Tool::Forkprof => "forkprof run",
            Tool::ForkprofEmpty => "forkprof run, empty programs",
            Tool::ForkprofPreciseLd => "forkprof run --precise-ld",
            Tool::ForkprofPreciseLdEmpty => "forkprof run --precise-ld, empty programs",
            Tool::ForkprofAlways => "forkprof run --ia32-syscalls always",
            Tool::ForkprofAlwaysEmpty => "forkprof run --ia32-syscalls always, empty programs",
            Tool::Record => "forkprof record",
            Tool::RecordCgroup => "forkprof record --cgroup (idle)",
            Tool::Monitor => "forkprof monitor",
            Tool::Strace => "strace -f -c",
            Tool::Perf => "perf trace -s",
            Tool::Bpftrace => "bpftrace phases.bt",
        }
    }

    /// What the loop measures the CPU time of, as SPAWN_LOOP_TRACER: the name of its
    /// ancestor that traces it. `record` and `monitor` are no ancestor of the loop: their
    /// script (`while_tracing`) names the agent's pid instead. None for the bare loop.
    fn tracer(self) -> Option<&'static str> {
        match self {
            Tool::Control => None,
            Tool::Strace => Some("strace"),
            Tool::Perf => Some("perf"),
            Tool::Bpftrace => Some("bpftrace"),
            _ => self.is_forkprof().then_some("forkprof"),
        }
    }

    /// The tool's floor: the same hooks with programs that return at entry, measured in the
    /// same rounds (`gap`).
    pub(super) fn floor(self) -> Option<Tool> {
        match self {
            Tool::Forkprof => Some(Tool::ForkprofEmpty),
            Tool::ForkprofPreciseLd => Some(Tool::ForkprofPreciseLdEmpty),
            Tool::ForkprofAlways => Some(Tool::ForkprofAlwaysEmpty),
            _ => None,
        }
    }

    /// Whether the tool is forkprof (which the bench builds).
    pub(super) fn is_forkprof(self) -> bool {
        matches!(
            self,
            Tool::Forkprof
                | Tool::ForkprofEmpty
                | Tool::ForkprofPreciseLd
                | Tool::ForkprofPreciseLdEmpty
                | Tool::ForkprofAlways
                | Tool::ForkprofAlwaysEmpty
                | Tool::Record
                | Tool::RecordCgroup
                | Tool::Monitor
        )
    }

    /// The Debian package that provides the tool, if it is not built here.
    fn package(self) -> Option<&'static str> {
        match self {
            Tool::Control
            | Tool::Forkprof
            | Tool::ForkprofEmpty
            | Tool::ForkprofPreciseLd
            | Tool::ForkprofPreciseLdEmpty
            | Tool::ForkprofAlways
            | Tool::ForkprofAlwaysEmpty
            | Tool::Record
            | Tool::RecordCgroup
            | Tool::Monitor => None,
            Tool::Strace => Some("strace"),
            Tool::Perf => Some("linux-perf"),
            Tool::Bpftrace => Some("bpftrace"),
        }
    }
}

/// Paths of everything a run needs, and what the loop runs.
pub(super) struct Paths {
    pub(super) dir: PathBuf,
    pub(super) spawn_loop: PathBuf,
    pub(super) true_dyn: PathBuf,
    pub(super) forkprof: PathBuf,
    phases_bt: PathBuf,
    pub(super) workload: Workload,
    /// FORKPROF_BENCH_ONLY for forkprof's runs (the ablation), if any.
    pub(super) only: Option<&'static str>,
    /// The empty cgroup that `Tool::RecordCgroup` records, as forkprof names it (see
    /// `IdleCgroup`).
    pub(super) idle_cgroup: Option<String>,
    /// `--pin`: the loop on `LOOP_CPU`, forkprof on `AGENT_CPU` (see `PINNABLE`).
    pub(super) pin: bool,
}

/// With `--pin`, the CPU the loop (and every process it spawns) runs on, and the one
/// forkprof's agent runs on.
const LOOP_CPU: &str = "0";
const AGENT_CPU: &str = "1";

/// The tools `--pin` applies to: those whose command runs the loop as its own argument.
pub(super) const PINNABLE: [Tool; 7] = [
    Tool::Control,
    Tool::Forkprof,
    Tool::ForkprofEmpty,
    Tool::ForkprofPreciseLd,
    Tool::ForkprofPreciseLdEmpty,
    Tool::ForkprofAlways,
    Tool::ForkprofAlwaysEmpty,
];

impl Paths {
    pub(super) fn new(workload: Workload) -> Self {
        let root = crate::root();
        let dir = root.join("target/bench");
        Paths {
            spawn_loop: dir.join("spawn_loop"),
            true_dyn: dir.join("true_dyn"),
            forkprof: root.join("target/release/forkprof"),
            phases_bt: root.join("bench/phases.bt"),
            dir,
            workload,
            only: None,
            idle_cgroup: None,
            pin: false,
        }
    }

    /// `program` on `cpu` where `--pin` says so (through `taskset`), else as it is.
    fn on_cpu(&self, cpu: &str, program: &Path) -> Command {
        if self.pin {
            let mut c = Command::new("taskset");
            c.args(["-c", cpu]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    /// The loop's last argument: the program to exec, or `--vfork-exit`.
    pub(super) fn loop_arg(&self) -> std::ffi::OsString {
        match (self.workload, self.workload.script()) {
            (_, Some(script)) => self.dir.join(script).into_os_string(),
            (Workload::VforkExit, None) => "--vfork-exit".into(),
            (_, None) => self.true_dyn.clone().into_os_string(),
        }
    }

    /// The benchmark switches a run of `tool` gets (after `clean_env`).
    pub(super) fn env(&self, tool: Option<Tool>) -> Vec<(&'static str, &'static str)> {
        let mut env = Vec::new();
        if matches!(
            tool,
            Some(Tool::ForkprofEmpty | Tool::ForkprofPreciseLdEmpty | Tool::ForkprofAlwaysEmpty)
        ) {
            env.push(("FORKPROF_BENCH_EMPTY", "1"));
        }
        if let (Some(only), Some(t)) = (self.only, tool)
            && t.is_forkprof()
        {
            env.push(("FORKPROF_BENCH_ONLY", only));
        }
        if let Some(tracer) = tool.and_then(Tool::tracer) {
            env.push(("SPAWN_LOOP_TRACER", tracer));
        }
        env
    }

    /// `sh -c` running forkprof `args` in the background until it says it is tracing (a
    /// stderr line starting with `ready`), then the loop, then SIGINT to forkprof.
    fn around(&self, args: &[&str], ready: &str) -> Command {
        while_tracing(
            &self.forkprof,
            &self.dir.join("agent.stderr"),
            args,
            ready,
            &self.spawn_loop,
        )
    }

    /// The command line of one run: the loop alone (`tool` None) or under a tool.
    pub(super) fn command(&self, tool: Option<Tool>, iterations: u32) -> Result<Command> {
        let n = iterations.to_string();
        let mut cmd = match tool {
            None | Some(Tool::Control) => self.on_cpu(LOOP_CPU, &self.spawn_loop),
            Some(
                t @ (Tool::Forkprof
                | Tool::ForkprofEmpty
                | Tool::ForkprofPreciseLd
                | Tool::ForkprofPreciseLdEmpty
                | Tool::ForkprofAlways
                | Tool::ForkprofAlwaysEmpty),
            ) => {
                // The check under the table reads the real default run's report only.
                let report = match t {
                    Tool::Forkprof => "forkprof-report.json",
                    Tool::ForkprofEmpty => "forkprof-empty-report.json",
                    Tool::ForkprofPreciseLd => "forkprof-precise-ld-report.json",
                    Tool::ForkprofPreciseLdEmpty => "forkprof-precise-ld-empty-report.json",
                    Tool::ForkprofAlways => "forkprof-always-report.json",
                    _ => "forkprof-always-empty-report.json",
                };
                let mut c = self.on_cpu(AGENT_CPU, &self.forkprof);
                c.arg("run");
                if matches!(t, Tool::ForkprofPreciseLd | Tool::ForkprofPreciseLdEmpty) {
                    c.arg("--precise-ld");
                }
                if matches!(t, Tool::ForkprofAlways | Tool::ForkprofAlwaysEmpty) {
                    c.args(["--ia32-syscalls", "always"]);
                }
                c.args(["--json", "--report"]).arg(self.dir.join(report));
                let inner = self.on_cpu(LOOP_CPU, &self.spawn_loop);
                c.arg("--").arg(inner.get_program()).args(inner.get_args());
                c
            }
            Some(Tool::Record) => {
                let db = self.dir.join("record.db");
                self.around(&record_args(path_str(&db)?), RECORDING)
            }
            Some(Tool::RecordCgroup) => {
                let db = self.dir.join("record-cgroup.db");
                let group = self
                    .idle_cgroup
                    .as_deref()
                    .context("no idle cgroup was made for `record --cgroup`")?;
                self.around(
                    &["record", "--force", "--cgroup", group, "-o", path_str(&db)?],
                    RECORDING,
                )
            }
            Some(Tool::Monitor) => self.around(&MONITOR_ARGS, SERVING),
            Some(Tool::Strace) => self.traced_by("strace", &["-f", "-c"]),
            Some(Tool::Perf) => self.traced_by("perf", &["trace", "-s"]),
            Some(Tool::Bpftrace) => return self.bpftrace(&n),
        };
        cmd.arg(&n).arg(self.loop_arg());
        Ok(cmd)
    }

    /// `program ARGS -o /dev/null -- LOOP` (the loop's own arguments still to add).
    fn traced_by(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .args(["-o", "/dev/null", "--"])
            .arg(&self.spawn_loop);
        c
    }

    /// bpftrace running phases.bt over the loop of `n` iterations.
    fn bpftrace(&self, n: &str) -> Result<Command> {
        // bpftrace -c takes one string and splits it on spaces.
        let line = format!(
            "{} {n} {}",
            path_str(&self.spawn_loop)?,
            self.loop_arg()
                .to_str()
                .context("a path that is not UTF-8")?
        );
        let mut c = Command::new("bpftrace");
        c.arg("-o")
            .arg(self.dir.join("bpftrace-phases.txt"))
            .arg(&self.phases_bt)
            .arg("-c")
            .arg(line);
        Ok(c)
    }
}

/// What `forkprof record` says on stderr once it traces.
pub(super) const RECORDING: &str = "forkprof: recording";
/// `forkprof monitor` on a free port, and what it says on stderr once it traces.
pub(super) const MONITOR_ARGS: [&str; 3] = ["monitor", "--listen", "127.0.0.1:0"];
pub(super) const SERVING: &str = "forkprof: serving metrics";

/// `forkprof record` of the whole system into `db` (replaced if it exists).
pub(super) fn record_args(db: &str) -> [&str; 4] {
    ["record", "--force", "-o", db]
}

/// `sh -c` running `forkprof ARGS` in the background (its stderr to `stderr`) until it says
/// it is tracing (a stderr line starting with `ready`), then `program` with the arguments the
/// caller adds, then SIGINT to forkprof; the exit status is the program's, or 1 when
/// forkprof stops early or fails (its stderr is shown then). `program` gets forkprof's pid
/// in SPAWN_LOOP_TRACER, so that the loop can measure the agent's CPU time.
///
/// The script empties `stderr` before it starts forkprof. The background child truncates
/// the file only once it runs, and the file is reused from run to run: a poll that came
/// first would find the previous run's ready line, and the loop would start while forkprof
/// was still attaching its programs or reading /proc. bench/busy-host.sh, whose bash holds
/// 10,000 jobs and forks slowly, met it in about half its measurements.
pub(super) fn while_tracing(
    forkprof: &Path,
    stderr: &Path,
    args: &[&str],
    ready: &str,
    program: &Path,
) -> Command {
    let script = format!(
        r#"fp=$1; out=$2; shift 2
: >"$out"
"$fp" {} 2>"$out" & agent=$!
until grep -q '^{ready}' "$out"; do
  kill -0 $agent 2>/dev/null || {{ cat "$out" >&2; exit 1; }}
  sleep 0.05
done
SPAWN_LOOP_TRACER=$agent "$@"; status=$?
kill -INT $agent; wait $agent || {{ cat "$out" >&2; exit 1; }}
exit $status"#,
        args.join(" ")
    );
    let mut c = Command::new("/bin/sh");
    c.args(["-c", &script, "sh"])
        .arg(forkprof)
        .arg(stderr)
        .arg(program);
    c
}

/// Gives `cmd` a fixed, minimal environment: what the workload sees must not depend on who
/// runs the bench. `cargo run` sets LD_LIBRARY_PATH, for one, and then every exec'd binary
/// searches its directories first: more syscalls per spawn, which made strace's overhead
/// several times larger. Only the caller's HOME and the settings of a forkprof wrapper
/// (`WRAPPER_VARS`) pass, where the caller set them.
pub(super) fn clean_env(cmd: &mut Command) {
    clean_env_from(cmd, |name| std::env::var_os(name));
}

/// The settings of bench/forkprof-with.sh, which `--before` may name: without them the
/// wrapper would run with its defaults whatever the caller set.
const WRAPPER_VARS: [&str; 3] = ["FORKPROF", "FORKPROF_WITH", "FORKPROF_WRAP"];

fn clean_env_from(cmd: &mut Command, caller: impl Fn(&str) -> Option<std::ffi::OsString>) {
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("LANG", "C.UTF-8");
    for name in std::iter::once("HOME").chain(WRAPPER_VARS) {
        if let Some(value) = caller(name) {
            cmd.env(name, value);
        }
    }
}

/// A command line as a shell would show it (for messages).
pub(super) fn shown(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The cgroup2 mount point, if this machine has one (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid hierarchy).
pub(super) fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

/// An empty cgroup v2 group for `Tool::RecordCgroup`: nothing ever runs in it, so forkprof
/// follows no process and leaves its hot hooks off; all the loop outside it pays is the
/// scope check of each fork, exec and exit. Removed when dropped.
pub(super) struct IdleCgroup {
    dir: PathBuf,
    /// Its path below the cgroup2 mount, as `--cgroup` takes it.
    pub(super) shown: String,
}

impl IdleCgroup {
    pub(super) fn make() -> Result<Self> {
        let mount = cgroup2_mount().context("this machine has no cgroup v2 hierarchy")?;
        let name = format!("forkprof-bench-idle-{}", std::process::id());
        let dir = mount.join(&name);
        if !dir.is_dir() {
            fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Ok(Self {
            dir,
            shown: format!("/{name}"),
        })
    }
}

impl Drop for IdleCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

fn path_str(p: &Path) -> Result<&str> {
    match p.to_str() {
        Some(s) if !s.contains(char::is_whitespace) => Ok(s),
        _ => bail!(
            "{}: bpftrace -c cannot take a path with spaces or invalid UTF-8",
            p.display()
        ),
    }
}

fn installed(package: &str) -> bool {
    crate::output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .contains("install ok installed")
}

/// Installs the missing packages the selected tools need. gcc is required; a peer whose
/// package cannot be installed is marked unavailable.
pub(super) fn ensure_packages(
    tools: &[Tool],
    workload: Workload,
    no_install: bool,
    unavailable: &mut Unavailable,
) -> Result<()> {
    let mut wanted = vec!["gcc"];
    wanted.extend(workload.packages());
    wanted.extend(tools.iter().filter_map(|t| t.package()));
    let missing: Vec<&str> = wanted.into_iter().filter(|p| !installed(p)).collect();
    if !missing.is_empty() && !no_install {
        apt_install(&missing);
    }
    for p in std::iter::once("gcc").chain(workload.packages().iter().copied()) {
        if !installed(p) && Command::new(p).arg("--version").output().is_err() {
            bail!("{p} is needed by the bench loop: apt-get install {p}");
        }
    }
    for &tool in tools {
        if let Some(p) = tool.package()
            && !installed(p)
        {
            let why = if no_install {
                format!("package {p} is not installed (--no-install)")
            } else {
                format!("package {p} could not be installed")
            };
            eprintln!("xtask: bench: {}: {why}", tool.label());
            unavailable.push((tool, why));
        }
    }
    Ok(())
}

/// `apt-get install`s each package, saying which failed.
fn apt_install(packages: &[&str]) {
    let updated = crate::run(Command::new("apt-get").args(["update", "-qq"]));
    if let Err(e) = updated {
        eprintln!("xtask: bench: apt-get update failed: {e:#}");
    }
    for p in packages {
        // one at a time, so that a package this distribution lacks costs only its peer
        let result = crate::run(
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends", p])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        );
        if let Err(e) = result {
            eprintln!("xtask: bench: cannot install {p}: {e:#}");
        }
    }
}

/// perf trace and bpftrace read tracepoint formats from tracefs, which a fresh machine may
/// not have mounted.
pub(super) fn ensure_tracefs(tools: &[Tool], unavailable: &mut Unavailable) {
    let needs = |t: &Tool| matches!(t, Tool::Perf | Tool::Bpftrace);
    if !tools.iter().any(needs) || Path::new("/sys/kernel/tracing/events").is_dir() {
        return;
    }
    let mounted =
        crate::run(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]));
    if let Err(e) = mounted {
        let why = format!("tracefs is not mounted and mounting it failed: {e:#}");
        for &tool in tools.iter().filter(|t| needs(t)) {
            eprintln!("xtask: bench: {}: {why}", tool.label());
            unavailable.push((tool, why.clone()));
        }
    }
}

/// Builds forkprof (`cargo xtask setup`, then a release build).
pub(super) fn build_forkprof() -> Result<()> {
    crate::setup()?;
    crate::run(Command::new("cargo").current_dir(crate::root()).args([
        "build",
        "--release",
        "-p",
        "forkprof",
    ]))
}

/// Builds the loop and the program it spawns into target/bench/, and writes what a
/// `--workload` of work as users run it needs there (make's `-j` is the number of CPUs).
pub(super) fn compile_loop(paths: &Paths) -> Result<()> {
    fs::create_dir_all(&paths.dir)
        .with_context(|| format!("cannot create {}", paths.dir.display()))?;
    let src = crate::root().join("bench");
    crate::run(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&paths.spawn_loop)
            .arg(src.join("spawn_loop.c")),
    )?;
    // dynamically linked on purpose: ld.so's start-up is part of what is measured
    crate::run(
        Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(&paths.true_dyn)
            .arg(src.join("true_dyn.c")),
    )?;
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    super::workload::write(paths.workload, &paths.dir, jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clean_environment_keeps_home_and_the_wrappers_settings_only() {
        let mut cmd = Command::new("true");
        clean_env_from(&mut cmd, |name| match name {
            "HOME" => Some("/root".into()),
            "FORKPROF_WITH" => Some("".into()),
            "FORKPROF_WRAP" => Some("taskset -c 0".into()),
            "LD_LIBRARY_PATH" => Some("/tmp".into()),
            _ => None,
        });
        let env: Vec<_> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_str().unwrap(), v.and_then(|v| v.to_str())))
            .collect();
        assert_eq!(
            env,
            [
                ("FORKPROF_WITH", Some("")),
                ("FORKPROF_WRAP", Some("taskset -c 0")),
                ("HOME", Some("/root")),
                ("LANG", Some("C.UTF-8")),
                (
                    "PATH",
                    Some("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
                ),
            ]
        );
    }

    #[test]
    fn command_lines() {
        let mut paths = Paths::new(Workload::ForkExec);
        let line = |paths: &Paths, tool| shown(&paths.command(tool, 3).unwrap());
        let (l, t) = (
            path_str(&paths.spawn_loop).unwrap(),
            path_str(&paths.true_dyn).unwrap(),
        );
        let p = &paths;
        assert_eq!(line(p, None), format!("{l} 3 {t}"));
        assert_eq!(line(p, Some(Tool::Control)), format!("{l} 3 {t}"));
        assert_eq!(
            line(p, Some(Tool::Strace)),
            format!("strace -f -c -o /dev/null -- {l} 3 {t}")
        );
        assert_eq!(
            line(p, Some(Tool::Perf)),
            format!("perf trace -s -o /dev/null -- {l} 3 {t}")
        );
        assert!(
            line(p, Some(Tool::Forkprof)).ends_with(&format!("forkprof-report.json -- {l} 3 {t}"))
        );
        assert!(line(p, Some(Tool::Bpftrace)).ends_with(&format!("phases.bt -c {l} 3 {t}")));
        // record and monitor run around the loop, until forkprof says it is tracing.
        let rec = line(p, Some(Tool::Record));
        assert!(
            rec.contains("record --force -o") && rec.ends_with(&format!("{l} 3 {t}")),
            "{rec}"
        );
        assert!(line(p, Some(Tool::Monitor)).contains("forkprof: serving metrics"));
        // The switches: empty programs, and the ablation's one family.
        // The loop measures the tracer's CPU: an ancestor by name, or (record, monitor) the
        // agent's pid, which their script passes.
        const AGENT: (&str, &str) = ("SPAWN_LOOP_TRACER", "forkprof");
        assert_eq!(p.env(None), vec![]);
        assert_eq!(p.env(Some(Tool::Control)), vec![]);
        assert_eq!(p.env(Some(Tool::Forkprof)), vec![AGENT]);
        assert_eq!(
            p.env(Some(Tool::ForkprofEmpty)),
            vec![("FORKPROF_BENCH_EMPTY", "1"), AGENT]
        );
        assert_eq!(
            p.env(Some(Tool::ForkprofPreciseLdEmpty)),
            vec![("FORKPROF_BENCH_EMPTY", "1"), AGENT]
        );
        assert!(line(p, Some(Tool::Record)).contains("SPAWN_LOOP_TRACER=$agent \"$@\""));
        let precise = line(p, Some(Tool::ForkprofPreciseLd));
        assert!(
            precise.contains(" run --precise-ld --json")
                && precise.ends_with(&format!("-- {l} 3 {t}")),
            "{precise}"
        );
        paths.only = Some("mmap");
        assert_eq!(
            paths.env(Some(Tool::Record)),
            vec![("FORKPROF_BENCH_ONLY", "mmap"), AGENT]
        );
        assert_eq!(
            paths.env(Some(Tool::Strace)),
            vec![("SPAWN_LOOP_TRACER", "strace")]
        );
        // record --cgroup needs its idle group, made by the bench before the runs.
        assert!(paths.command(Some(Tool::RecordCgroup), 3).is_err());
        paths.idle_cgroup = Some("/forkprof-bench-idle-1".into());
        let scoped = line(&paths, Some(Tool::RecordCgroup));
        assert!(
            scoped.contains("record --force --cgroup /forkprof-bench-idle-1 -o")
                && scoped.ends_with(&format!("{l} 3 {t}")),
            "{scoped}"
        );
        // A workload of work as users run it: the loop execs the script the bench wrote.
        for (workload, script) in [
            (Workload::Make, "make_build"),
            (Workload::Shell, "shell_script"),
        ] {
            paths.workload = workload;
            let s = path_str(&paths.dir.join(script)).unwrap().to_owned();
            assert_eq!(line(&paths, None), format!("{l} 3 {s}"));
            assert!(line(&paths, Some(Tool::Bpftrace)).ends_with(&format!("-c {l} 3 {s}")));
        }
        paths.workload = Workload::VforkExit;
        assert_eq!(line(&paths, None), format!("{l} 3 --vfork-exit"));
        // --pin: the loop on CPU 0, forkprof (its agent) on CPU 1.
        paths.pin = true;
        assert_eq!(
            line(&paths, Some(Tool::Control)),
            format!("taskset -c 0 {l} 3 --vfork-exit")
        );
        let pinned = line(&paths, Some(Tool::Forkprof));
        assert!(
            pinned.starts_with("taskset -c 1 ")
                && pinned.ends_with(&format!("-- taskset -c 0 {l} 3 --vfork-exit")),
            "{pinned}"
        );
    }
}
