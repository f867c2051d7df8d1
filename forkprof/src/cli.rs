//! The command line (clap). Usage errors exit 2 with clap's message.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::loader::Ia32Syscalls;
use crate::model::report::{GroupBy, SortBy};

#[derive(Parser, Debug)]
#[command(
    name = "forkprof",
    version,
    about = "Profile the cost of creating processes, per process, with eBPF",
    propagate_version = true
)]
pub struct Cli {
    /// Show full error chains (verifier logs included) instead of one line.
    #[arg(long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Trace a command and all its descendants, then report (needs root: run with sudo).
    Run(RunArgs),
    /// Record process creation to an SQLite file until stopped (needs root).
    Record(RecordArgs),
    /// Report on a recording made by `record` or `run -o`.
    Report(ReportCmdArgs),
    /// Compare two recordings: what got cheaper or dearer, and whether the change is real.
    Diff(DiffArgs),
    /// Write a recording's processes, one row each, to an Apache Parquet file.
    Export(ExportArgs),
    /// A live, system-wide view of process creation per binary (needs root).
    Top(TopArgs),
    /// Export live, system-wide spawn metrics for Prometheus (needs root).
    Monitor(MonitorArgs),
    /// Run the classic fork/vfork/posix_spawn and static/dynamic experiments and explain them
    /// (needs root).
    Bench(BenchArgs),
    /// Show which kernel hooks load here, and why any are missing.
    Doctor(DoctorArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout: `forkprof man | man -l -`; with a subcommand,
    /// that subcommand's page (forkprof-SUBCOMMAND(1)).
    Man {
        /// The subcommand (run, record, report, ...).
        subcommand: Option<String>,
    },
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print one JSON object (kernel, hooks, phase sources) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Fewer rows and iterations (under a minute).
    #[arg(long)]
    pub quick: bool,
    /// Iterations per row, at least 1 (overrides the defaults).
    #[arg(long, value_name = "N", value_parser = at_least_one::<u64>)]
    pub iterations: Option<u64>,
    /// Only rows whose name contains one of these (repeat the flag).
    #[arg(long = "rows", value_name = "TEXT")]
    pub rows: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Run the workloads, and the processes they spawn, on this CPU only (default: the last
    /// CPU that forkprof may run on).
    #[arg(long, value_name = "N", value_parser = parse_cpu, conflicts_with = "no_pin")]
    pub cpu: Option<usize>,
    /// Let the scheduler place the workloads and their children on any CPU. Each spawn then
    /// includes whatever cross-CPU wake-ups the scheduler chose.
    #[arg(long)]
    pub no_pin: bool,
}

/// The CPUs this process may run on (sched_getaffinity), in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: the index is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

fn parse_cpu(s: &str) -> Result<usize, String> {
    let cpu: usize = s
        .parse()
        .map_err(|_| format!("{s:?} is not a CPU number"))?;
    let allowed = allowed_cpus();
    if !allowed.contains(&cpu) {
        return Err(format!(
            "CPU {cpu} is not one forkprof may run on (allowed: {allowed:?})"
        ));
    }
    Ok(cpu)
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Refresh interval.
    #[arg(long, value_parser = parse_positive_duration, default_value = "1s", value_name = "DURATION")]
    pub interval: std::time::Duration,
    /// Print one interval as plain text and exit.
    #[arg(long)]
    pub once: bool,
    /// Print plain text every interval instead of the full-screen view (also without a TTY).
    #[arg(long)]
    pub plain: bool,
    /// Rows shown per interval in plain output (binaries, cgroups or units, as `--by` says).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = at_least_one::<usize>)]
    pub top: usize,
    /// Trace only the processes of this cgroup v2 subtree (its path as reports show it,
    /// `/system.slice/nginx.service`, or under the cgroup2 mount, `/sys/fs/cgroup/...`).
    /// Filtered in the kernel: processes outside it cost one check per fork, exec and exit.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// What a row is at start (the `g` key cycles them); also for the plain output.
    #[arg(long, value_enum, default_value_t = LiveGroupArg::Binary, value_name = "GROUPING")]
    pub by: LiveGroupArg,
    #[command(flatten)]
    pub hooks: HookArgs,
}

/// `top --by`: what a row of the live view is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LiveGroupArg {
    /// The binary a process ran last.
    Binary,
    /// The process's cgroup v2 path (where it exec'd, else where it was created).
    Cgroup,
    /// The systemd unit or container of that cgroup (`nginx.service`, a container's
    /// 12-hex-digit id).
    Unit,
}

impl From<LiveGroupArg> for crate::model::top::GroupMode {
    fn from(g: LiveGroupArg) -> Self {
        match g {
            LiveGroupArg::Binary => Self::Binary,
            LiveGroupArg::Cgroup => Self::Cgroup,
            LiveGroupArg::Unit => Self::Unit,
        }
    }
}

#[derive(Args, Debug)]
pub struct MonitorArgs {
    /// Address to serve /metrics on.
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR:PORT", value_parser = listen_address)]
    pub listen: String,
    /// Binaries exported with their own series (by total spawn cost); the rest are `other`.
    /// From 0 (all are `other`) to 100000.
    #[arg(long, visible_alias = "top", default_value_t = 20, value_name = "K", value_parser = series_count)]
    pub top_binaries: usize,
    /// Cgroups exported with their own series (by total spawn cost); the rest are `other`.
    /// From 0 (all are `other`) to 100000.
    #[arg(long, default_value_t = 20, value_name = "K", value_parser = series_count)]
    pub top_cgroups: usize,
    /// Trace only the processes of this cgroup v2 subtree (its path as reports show it,
    /// `/system.slice/nginx.service`, or under the cgroup2 mount, `/sys/fs/cgroup/...`).
    /// Filtered in the kernel: processes outside it cost one check per fork, exec and exit.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    #[command(flatten)]
    pub hooks: HookArgs,
}

#[derive(Args, Debug)]
pub struct RecordingArgs {
    /// Do not record command-line arguments (they can hold secrets): the kernel does not even
    /// read them. argc is kept.
    #[arg(long)]
    pub no_args: bool,
    /// Bracket the dynamic linker with uprobes (ld.so `_dl_debug_state`, libc
    /// `__libc_start_main`) instead of its syscalls: exact, but costlier per spawn.
    #[arg(long)]
    pub precise_ld: bool,
    /// Overwrite the recording file if it exists (otherwise forkprof refuses, exit 2).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub hooks: HookArgs,
}

/// Which hooks to trade for which cost.
#[derive(Args, Debug)]
pub struct HookArgs {
    /// Where the kernel refuses trampolines (fentry): `always` hooks every syscall (sys_enter
    /// and sys_exit); `on-demand` (the default) and `never` hook only the syscalls forkprof
    /// follows (the `syscalls:sys_enter_*` events), so that every other syscall on the
    /// machine pays about half as much. Those events skip 32-bit processes' syscalls:
    /// `on-demand` attaches sys_enter and sys_exit for them once a followed process execs a
    /// 32-bit image or a 32-bit process's spawn goes unseen, and detaches them once no
    /// followed 32-bit process has been left for 10 s; while they are attached, every syscall
    /// pays for both (`run` of a 32-bit command: attached from the start, for good). `never`
    /// does not attach them. What 32-bit processes spawn unseen is counted (`ia32_unseen`).
    /// No effect where trampolines attach.
    #[arg(long, value_enum, value_name = "WHEN")]
    pub ia32_syscalls: Option<Ia32Syscalls>,
    /// The same as `--ia32-syscalls never`.
    #[arg(long, conflicts_with = "ia32_syscalls")]
    pub no_ia32_syscalls: bool,
}

impl HookArgs {
    /// `--ia32-syscalls` as given (`never` for `--no-ia32-syscalls`), if given.
    pub fn ia32_syscalls_given(&self) -> Option<Ia32Syscalls> {
        if self.no_ia32_syscalls {
            Some(Ia32Syscalls::Never)
        } else {
            self.ia32_syscalls
        }
    }

    /// `--ia32-syscalls`, or its default.
    pub fn ia32_syscalls(&self) -> Ia32Syscalls {
        self.ia32_syscalls_given().unwrap_or_default()
    }
}

/// Why a command's report outputs (`flag`, path) may not be written: one is a file the
/// command reads or records to (`inputs`), two are the same file, or one is an existing
/// SQLite database (a recording, most likely), which no report output overwrites. Checked
/// with the invoking user's view of the paths (see `privilege::as_user`).
pub fn refuse_outputs(
    inputs: &[(&str, &std::path::Path)],
    outputs: &[(&str, &std::path::Path)],
) -> Option<String> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let user = crate::privilege::InvokingUser::from_env().ok().flatten();
    let check = || -> anyhow::Result<Option<String>> {
        // A regular file's identity; devices and pipes (/dev/null, /dev/stdout) may be
        // given more than once.
        let id = |p: &std::path::Path| {
            std::fs::metadata(p)
                .ok()
                .filter(|m| m.is_file())
                .map(|m| (m.dev(), m.ino()))
        };
        for (i, &(flag, out)) in outputs.iter().enumerate() {
            let Some(out_id) = id(out) else {
                // Not there yet (`run -o` creates its recording): only the same path given
                // twice is the same file.
                if let Some((other, _)) =
                    inputs.iter().chain(&outputs[..i]).find(|(_, p)| *p == out)
                {
                    return Ok(Some(format!(
                        "{} is given to both {other} and {flag}; give each its own file",
                        out.display()
                    )));
                }
                continue;
            };
            if let Some((_, input)) = inputs.iter().find(|(_, p)| id(p) == Some(out_id)) {
                return Ok(Some(format!(
                    "{flag} {} is the recording {}; give another file",
                    out.display(),
                    input.display()
                )));
            }
            if let Some((other, _)) = outputs[..i].iter().find(|(_, p)| id(p) == Some(out_id)) {
                return Ok(Some(format!(
                    "{} is given to both {other} and {flag}; give each its own file",
                    out.display()
                )));
            }
            let mut magic = [0u8; 16];
            let is_sqlite = std::fs::File::open(out)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok()
                && &magic == b"SQLite format 3\0";
            if is_sqlite {
                return Ok(Some(format!(
                    "{flag} {} is a SQLite database (a recording?); a report does not overwrite \
                     one: remove it first, or give another file",
                    out.display()
                )));
            }
        }
        Ok(None)
    };
    crate::privilege::as_user(user.as_ref(), check).unwrap_or_else(|e| Some(format!("{e:#}")))
}

/// Why a recording may not be written to `path`: it exists and `--force` was not given.
pub fn refuse_overwrite(path: &std::path::Path, force: bool) -> Option<String> {
    (!force && path.exists()).then(|| {
        format!(
            "{} exists; give --force to overwrite it, or another file",
            path.display()
        )
    })
}

/// Why a recording cannot be written to `path`, if it cannot: what exists there is not a
/// regular file (a FIFO, a device, a directory: an SQLite database, its journal beside it,
/// can be none of them, and a FIFO's open would wait once the programs are loaded), or it
/// exists and `force` was not given.
pub fn refuse_recording_path(path: &std::path::Path, force: bool) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Some(format!(
            "{} is not a regular file: a recording is an SQLite file",
            path.display()
        )),
        _ => refuse_overwrite(path, force),
    }
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// The recording to write (SQLite, mode 0600).
    #[arg(short = 'o', long = "output", value_name = "FILE", value_parser = writable_path)]
    pub output: PathBuf,
    /// Stop after this long (e.g. 30s, 5m, 1h); otherwise at SIGINT or SIGTERM.
    #[arg(long, value_parser = parse_positive_duration, value_name = "DURATION")]
    pub duration: Option<std::time::Duration>,
    /// Trace only this process and its descendants instead of the whole system.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,
    /// Trace only the processes of this cgroup v2 subtree (its path as reports show it,
    /// `/system.slice/nginx.service`, or under the cgroup2 mount, `/sys/fs/cgroup/...`).
    /// Filtered in the kernel: processes outside it cost one check per fork, exec and exit.
    #[arg(long, value_name = "PATH", conflicts_with = "pid")]
    pub cgroup: Option<String>,
    #[command(flatten)]
    pub recording: RecordingArgs,
}

/// An output path whose directory exists and can be written (under sudo, by the invoking
/// user): checked when the command line is parsed, so that a typo fails at once (exit 2)
/// rather than after a long trace.
fn writable_path(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    crate::privilege::may_write(&path)?;
    Ok(path)
}

/// The longest `--interval` or `--duration`: a year. Longer is a typo (`1000d` for `100s`),
/// and near the clock's range a timer's deadline would overflow.
const LONGEST: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

/// A duration that must be longer than zero and at most `LONGEST` (`--interval`,
/// `--duration`).
fn parse_positive_duration(s: &str) -> Result<std::time::Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be longer than 0".into()),
        d if d > LONGEST => Err("must be at most a year (366d)".into()),
        d => Ok(d),
    }
}

/// HOST:PORT (an IPv6 address in brackets), the port a number below 65536 (0: any free
/// one). Whether the host resolves and the port is free is found out when binding (exit 1).
fn listen_address(s: &str) -> Result<String, String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or("want HOST:PORT, such as 127.0.0.1:9464 or [::1]:9464")?;
    if host.is_empty() {
        return Err("no host before the port: want HOST:PORT, such as 0.0.0.0:9464".into());
    }
    port.parse::<u16>()
        .map_err(|_| format!("port {port:?} is not a number from 0 to 65535"))?;
    Ok(s.to_string())
}

/// A count that must be at least 1 (`--top`, `bench --iterations`).
fn at_least_one<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr<Err = std::num::ParseIntError> + PartialEq + From<u8>,
{
    match s.parse::<T>().map_err(|e| e.to_string())? {
        n if n == T::from(0) => Err("must be at least 1".into()),
        n => Ok(n),
    }
}

/// The most series `monitor --top-binaries` or `--top-cgroups` may ask for. Each family
/// keeps up to 50 K + 100 groups in memory (`output::prometheus`), and more is a typo.
const MOST_SERIES: usize = 100_000;

/// `monitor --top-binaries` and `--top-cgroups`: from 0 to `MOST_SERIES`.
fn series_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n <= MOST_SERIES => Ok(n),
        _ => Err(format!("must be a number from 0 to {MOST_SERIES}")),
    }
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(secs) = s.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return std::time::Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s} seconds is longer than any clock can count"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (try 30s, 5m or 1h)"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Args, Debug)]
pub struct ReportCmdArgs {
    /// The recording.
    pub file: PathBuf,
    /// How to group processes.
    #[arg(long, value_enum, default_value_t = GroupArg::Binary)]
    pub by: GroupArg,
    /// Order of the rows (by spawn cost, or by number of processes).
    #[arg(long, value_enum, default_value_t = SortArg::Total)]
    pub sort: SortArg,
    /// Rows shown in each table.
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = at_least_one::<usize>)]
    pub top: usize,
    /// Only processes whose binary path contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Only processes created at least this long after the recording's first record.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub from: Option<std::time::Duration>,
    /// Only processes created less than this long after the first record.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub to: Option<std::time::Duration>,
    /// Output: tables, one JSON document, or CSV with one row per group (on stdout).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// One row per process: added to the JSON report (`--format json`), or the CSV's rows
    /// instead of the groups' (`--format csv`: the columns of `export --parquet`, listed in
    /// /usr/share/doc/forkprof/recording.md).
    #[arg(long)]
    pub processes: bool,
    /// Write a flame graph (SVG) of spawn cost by process ancestry.
    #[arg(long, value_name = "OUT.svg", value_parser = writable_path)]
    pub flamegraph: Option<PathBuf>,
    /// Write the folded stacks behind the flame graph.
    #[arg(long, value_name = "OUT", value_parser = writable_path)]
    pub folded: Option<PathBuf>,
    /// Write a trace-event JSON timeline for ui.perfetto.dev or chrome://tracing.
    #[arg(long, value_name = "OUT.json", value_parser = writable_path)]
    pub perfetto: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(
    override_usage = "forkprof diff [OPTIONS] BEFORE AFTER\n       forkprof diff [OPTIONS] BEFORE... -- AFTER...",
    after_help = "One recording a side compares processes, but cannot tell a change from the \
                  machine's drift between the two runs. Record each side 3 or more times, \
                  alternating, and give them all: forkprof diff before-*.db -- after-*.db"
)]
pub struct DiffArgs {
    /// The recording before the change (`record -o` or `run -o`) and the one after; or
    /// several runs before, then `--` and several runs after.
    #[arg(required = true, value_name = "BEFORE")]
    pub before: Vec<PathBuf>,
    /// With `--`: the recordings after the change.
    #[arg(last = true, value_name = "AFTER")]
    pub after: Vec<PathBuf>,
    /// How to group processes.
    #[arg(long, value_enum, default_value_t = GroupArg::Binary)]
    pub by: GroupArg,
    /// Output: tables, one JSON document, or CSV with one row per group (on stdout).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Rows shown in the table.
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = at_least_one::<usize>)]
    pub top: usize,
    /// A ratio whose whole 99% interval lies within ±PCT% of 1 is no significant change.
    #[arg(long, default_value_t = 10.0, value_name = "PCT", value_parser = parse_noise)]
    pub noise: f64,
    /// Write a differential flame graph (SVG) of spawn cost by process ancestry.
    #[arg(long, value_name = "OUT.svg", value_parser = writable_path)]
    pub flamegraph: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "The columns are documented in /usr/share/doc/forkprof/recording.md \
                  (docs/recording.md in the source). The files of several hosts read as \
                  one table: SELECT host, \"binary\", count(*) FROM 'fleet/*.parquet' \
                  GROUP BY ALL (DuckDB)"
)]
pub struct ExportArgs {
    /// The recording (`record -o` or `run -o`).
    pub file: PathBuf,
    /// Write one row per process to this Parquet file (mode 0600).
    #[arg(long, value_name = "OUT", value_parser = writable_path)]
    pub parquet: PathBuf,
    /// The value of the `host` column (default: the host name the recording was made on).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Overwrite OUT if it exists (otherwise forkprof refuses, exit 2).
    #[arg(long)]
    pub force: bool,
}

fn parse_noise(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..100.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a percentage from 0 to 100")),
    }
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Write the report as one JSON document instead of tables. Like the tables it goes to
    /// stderr, so that the command's own stdout stays clean: `--report FILE` writes it to a
    /// file, and `--report /dev/stdout` to stdout when the command's output is not needed.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE (mode 0600) instead of stderr.
    #[arg(long, value_name = "FILE", value_parser = writable_path)]
    pub report: Option<PathBuf>,
    /// Rows shown in each table.
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = at_least_one::<usize>)]
    pub top: usize,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub output_format: ReportArgs,
    /// Also record to this SQLite file (as `record -o`).
    #[arg(short = 'o', long = "output", value_name = "FILE", value_parser = writable_path)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub recording: RecordingArgs,
    /// The command to trace, and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// `report --by`: the model's `GroupBy`, as a command-line value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupArg {
    /// The binary a process ran last.
    Binary,
    /// The binary of the process's parent when it was created.
    Parent,
    /// How the process was created.
    Method,
    /// The chain of binaries from the root to the process (make;sh;gcc;cc1).
    Ancestry,
    /// The process's cgroup v2 path (where it exec'd, else where it was created).
    Cgroup,
    /// The systemd unit or container of that cgroup (`nginx.service`, a container's
    /// 12-hex-digit id).
    Unit,
}

impl From<GroupArg> for GroupBy {
    fn from(g: GroupArg) -> Self {
        match g {
            GroupArg::Binary => Self::Binary,
            GroupArg::Parent => Self::Parent,
            GroupArg::Method => Self::Method,
            GroupArg::Ancestry => Self::Ancestry,
            GroupArg::Cgroup => Self::Cgroup,
            GroupArg::Unit => Self::Unit,
        }
    }
}

/// `report --sort`: the model's `SortBy`, as a command-line value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortArg {
    /// Total spawn cost.
    Total,
    /// Mean spawn cost.
    Mean,
    /// 99th percentile of spawn cost.
    P99,
    /// Number of processes.
    Count,
}

impl From<SortArg> for SortBy {
    fn from(s: SortArg) -> Self {
        match s {
            SortArg::Total => Self::Total,
            SortArg::Mean => Self::Mean,
            SortArg::P99 => Self::P99,
            SortArg::Count => Self::Count,
        }
    }
}
