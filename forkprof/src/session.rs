//! Sessions, the API of run, record, top and monitor: start, run until a stop, drain, report.
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use aya::maps::MapData;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::cgroups::{CgroupNames, CgroupScope, PopulatedWatch};
use crate::collector::{Collector, Pace};
use crate::decode::Record;
use crate::elf::InterpCache;
use crate::found::Snapshot;
use crate::ldprobes::LdProbes;
use crate::loader::{self, Ia32Syscalls, LoadOptions, Loaded};
use crate::model::live::{Counters, Finished, Live};
use crate::model::mounts::parse_mountinfo;
use crate::model::report::Context;
use crate::model::trace::{ExitStatus, LostCounts};
use crate::model::{Report, Trace};
use crate::privilege::InvokingUser;
use crate::recording::Writer;
use forkprof_common::ProcKey;
use rustc_hash::FxHashSet;

/// What a trace session traces and where it records. The default: the processes added to it
/// (and their descendants), nothing recorded.
#[derive(Default)]
pub struct Options {
    pub trace_all: bool,
    pub precise_ld: bool,
    /// `--ia32-syscalls` (`LoadOptions::ia32_syscalls`).
    pub ia32_syscalls: Ia32Syscalls,
    /// Record to this SQLite file.
    pub output: Option<PathBuf>,
    pub keep_args: bool,
    pub owner: Option<InvokingUser>,
    /// Stored in the recording's meta table at once.
    pub meta: Vec<(String, String)>,
    /// How promptly the agent collects (`Pace::LAZY` only where nothing reads the records
    /// before the session ends).
    pub pace: Pace,
    /// Keep no trace of the processes seen: they go to the recording alone, which derives
    /// its processes and phases tables from the file at the end (`finish_from_file`). So
    /// `record`'s memory stays bounded however many processes it records.
    pub keep_no_trace: bool,
}

/// How often the loss counters are copied into the recording.
const LOSS_EVERY: Duration = Duration::from_secs(1);

/// Host facts for a recording's meta table.
pub fn host_meta() -> Vec<(String, String)> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    vec![
        ("host".into(), read("/proc/sys/kernel/hostname")),
        ("kernel".into(), read("/proc/sys/kernel/osrelease")),
        ("forkprof_version".into(), env!("CARGO_PKG_VERSION").into()),
        (
            "started_unix_ms".into(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
                .to_string(),
        ),
        ("started_ns".into(), monotonic_ns().to_string()),
    ]
}

/// CLOCK_MONOTONIC, the clock of every record.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What every command that loads the programs does first: checks the privileges, then builds
/// the runtime its session runs on (enter it before starting the session).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    loader::check_privileges()?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Why `StopSignals::or_after` completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT or SIGTERM.
    Signal,
    /// The duration passed.
    Elapsed,
}

/// SIGINT and SIGTERM, which stop record, top and monitor. Created once, so that a signal
/// between two `run_until`s is not missed. Needs the runtime entered.
pub struct StopSignals {
    int: Signal,
    term: Signal,
    /// SIGHUP (the terminal closed), unless it was ignored when forkprof started (`nohup`).
    hup: Option<Signal>,
}

impl StopSignals {
    pub fn new() -> Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            hup: if hangup_ignored() {
                None
            } else {
                Some(signal(SignalKind::hangup()).context("SIGHUP handler")?)
            },
        })
    }

    /// Completes at the first signal, or once `after` has passed (never, if `None`).
    pub async fn or_after(&mut self, after: Option<Duration>) -> Stop {
        let elapsed = async {
            match after {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let hangup = async {
            match self.hup.as_mut() {
                Some(hup) => hup.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.int.recv() => Stop::Signal,
            _ = self.term.recv() => Stop::Signal,
            _ = hangup => Stop::Signal,
            _ = elapsed => Stop::Elapsed,
        }
    }

    /// A flag set by any of the same signals from now on: what stops a step that follows
    /// the stop (`record`'s derived tables) when the user signals again.
    pub fn again(&self) -> Result<Arc<AtomicBool>> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let flag = Arc::new(AtomicBool::new(false));
        let mut signals = vec![SIGINT, SIGTERM];
        signals.extend(self.hup.as_ref().map(|_| SIGHUP));
        for s in signals {
            signal_hook::flag::register(s, Arc::clone(&flag))
                .with_context(|| format!("a handler for signal {s}"))?;
        }
        Ok(flag)
    }
}

/// Whether SIGHUP is ignored (`nohup forkprof record ...`): then it stays so.
fn hangup_ignored() -> bool {
    // SAFETY: sigaction with a NULL new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// The processes the agent asks the kernel to trace (map `SEEDS`), by fd: valid while its
/// session lives. The kernel adopts a seed into its traced set at the process's first fork,
/// exec attempt or exit, and follows its descendants from there.
#[derive(Clone, Copy, Debug)]
pub struct SeedsMap(i32);

impl SeedsMap {
    /// Adds `pid` with one raw bpf(2) call. It allocates nothing and takes no lock, so a
    /// forked child may call it before exec (still root): its exec is then traced from the
    /// first instruction.
    pub fn seed(self, pid: u32) -> std::io::Result<()> {
        const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
        let value: u32 = 1;
        // union bpf_attr for BPF_MAP_UPDATE_ELEM: map_fd, key, value, flags (BPF_ANY).
        let attr: [u64; 4] = [
            self.0 as u64,
            &pid as *const u32 as u64,
            &value as *const u32 as u64,
            0,
        ];
        // SAFETY: attr and the key/value it points to live until the call returns.
        let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, attr.as_ptr(), 32) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// What both kinds of session drive: the loaded programs, the collector, and the
/// `--precise-ld` probes, which are attached as exec records come in.
struct Tracer {
    loaded: Loaded,
    collector: Collector,
    ld_probes: Option<LdProbes>,
    /// With a `--cgroup` scope: the hot hooks wait, loaded, until the scope has a process.
    arming: Option<Arming>,
}

/// A `--cgroup` scope's hot hooks (see `loader::Job::hot`), left off until the scope has a
/// process: a fork+exec loop outside an empty scope then pays for no hook that fires on
/// every syscall, page fault or mmap-lock event. They stay on once attached.
struct Arming {
    watch: PopulatedWatch,
    /// The scope as reports show it, for what is said on stderr.
    path: String,
    /// Say on stderr when they are attached (not under the TUI).
    announce: bool,
    /// The scope's directory, to list its processes once armed.
    dir: PathBuf,
}

/// What the tracer hands its session.
enum Traced {
    Record(Record),
    /// The processes in the `--cgroup` scope when its hooks were attached. What they did
    /// before was not seen, so /proc names them, read as soon as they are known.
    InScope(Vec<u32>),
}

/// Completes once `arming`'s scope has a process; never when there is nothing to arm.
async fn scope_populated(arming: &mut Option<Arming>) -> std::io::Result<()> {
    match arming {
        Some(a) => a.watch.populated().await,
        None => std::future::pending().await,
    }
}

impl Tracer {
    /// Loads and attaches everything. Must be called inside the runtime.
    /// `capture_argv`: exec records carry argv's strings (only when something shows them).
    fn start(
        trace_all: bool,
        precise_ld: bool,
        ia32_syscalls: Ia32Syscalls,
        capture_argv: bool,
        scope: Option<&CgroupScope>,
        announce: bool,
        pace: Pace,
    ) -> Result<Self> {
        let mut loaded = loader::load(&LoadOptions {
            trace_all,
            precise_ld,
            ia32_syscalls,
            capture_argv,
            cgroup_scope: scope.map(CgroupScope::fd),
            defer_hot: scope.is_some(),
            pace,
            ..Default::default()
        })?;
        let arming = match scope {
            Some(scope) if !loaded.deferred.is_empty() => Some(Arming {
                watch: scope
                    .watch_populated()
                    .with_context(|| format!("watching cgroup {}", scope.path))?,
                path: scope.path.clone(),
                announce,
                dir: scope.dir().to_path_buf(),
            }),
            _ => None,
        };
        let ld_probes = if precise_ld {
            Some(LdProbes::new(&mut loaded.ebpf).context("--precise-ld")?)
        } else {
            None
        };
        let collector = Collector::new(&mut loaded.ebpf, pace.poll, loaded.proc_slot_mask)?;
        let mut tracer = Self {
            loaded,
            collector,
            ld_probes,
            arming,
        };
        // A scope that has a process now is armed before tracing is said to start (its
        // processes are in the session's /proc snapshot, read after this).
        if tracer
            .arming
            .as_ref()
            .is_some_and(|a| a.watch.is_populated())
        {
            tracer.arm()?;
        }
        Ok(tracer)
    }

    /// Attaches the scope's deferred hooks, says so, and returns the scope's processes then.
    fn arm(&mut self) -> Result<Vec<u32>> {
        let Some(arming) = self.arming.take() else {
            return Ok(Vec::new());
        };
        loader::arm(&mut self.loaded)
            .with_context(|| format!("attaching the hooks for cgroup {}", arming.path))?;
        if arming.announce {
            eprintln!(
                "forkprof: cgroup {} has a process: its syscall, mmap-lock and page-fault \
                 hooks are attached now",
                arming.path
            );
        }
        Ok(crate::cgroups::processes_below(&arming.dir))
    }

    /// Collects until `stop` completes, and returns its output. Each record goes to the
    /// `--precise-ld` probes (a new interpreter to attach to), then to `route`, as do the
    /// scope's processes when its hooks are attached; `tick` runs after each batch.
    async fn run_until<T>(
        &mut self,
        stop: impl Future<Output = T>,
        mut route: impl FnMut(Traced),
        mut tick: impl FnMut(&Collector) -> Result<()>,
    ) -> Result<T> {
        tokio::pin!(stop);
        loop {
            let Self {
                loaded,
                collector,
                ld_probes,
                arming,
            } = &mut *self;
            let mut each = |record: Record| {
                if let Some(probes) = ld_probes.as_mut() {
                    probes.watch(&mut loaded.ebpf, &record);
                }
                route(Traced::Record(record));
            };
            tokio::select! {
                out = &mut stop => {
                    // The live views stop every update, often before a poll ends: the hooks
                    // are tended here too, or an idle `monitor` never would.
                    self.tend_ia32_hooks();
                    return Ok(out);
                }
                r = collector.collect(&mut each) => r?,
                r = scope_populated(arming) => {
                    r.context("watching the --cgroup scope")?;
                    let in_scope = self.arm()?;
                    route(Traced::InScope(in_scope));
                }
            }
            self.tend_ia32_hooks();
            tick(&self.collector)?;
        }
    }

    /// `--ia32-syscalls on-demand`: attaches the hooks that see 32-bit processes' syscalls
    /// once the kernel asks for them, and detaches them once none is left
    /// (`loader::tend_ia32_hooks`). A failure is said on stderr, not fatal: the kernel goes
    /// on counting what they would have seen.
    fn tend_ia32_hooks(&mut self) {
        if self.loaded.standby.is_empty() && !self.loaded.ia32.attached() {
            return;
        }
        if let Err(e) = loader::tend_ia32_hooks(&mut self.loaded, std::time::Instant::now()) {
            eprintln!("forkprof: {e:#}");
        }
    }

    pub fn sources(&self) -> crate::model::phases::PhaseMap<String> {
        use crate::model::phases::Phase;
        let mut sources = self.loaded.sources();
        if let Some(probes) = &self.ld_probes {
            // The uprobes give the outer edges; ld_map still ends, and ld_reloc_init still
            // starts, at arch_prctl(ARCH_SET_FS), seen by sys_enter.
            let syscalls = sources.get(Phase::LdMap).cloned().unwrap_or_default();
            for phase in [Phase::LdStart, Phase::LdMap, Phase::LdRelocInit] {
                let text = match phase {
                    Phase::LdStart => probes.describe(),
                    _ => format!("{} + {syscalls}", probes.describe()),
                };
                sources.insert(phase, text);
            }
        }
        sources
    }
}

/// The names a trace session gives beyond its records: /proc's labels of the processes
/// found running when tracing started, and the paths of cgroup ids.
struct Names {
    found: Snapshot,
    cgroups: CgroupNames,
}

/// What a session that keeps no trace still follows of its processes: those running after
/// an exec, whose dynamic-linker record the kernel holds until their exit (read at the end
/// by `Collector::held_ld`). One whose exit record was lost stays here (the loss is
/// counted): a few bytes each.
#[derive(Default)]
struct Running(FxHashSet<ProcKey>);

impl Running {
    fn see(&mut self, record: &Record) {
        match record {
            Record::Exec(r) if r.errno == 0 => {
                self.0.insert(r.hdr.proc);
            }
            Record::Exit(r) => {
                self.0.remove(&r.hdr.proc);
            }
            _ => {}
        }
    }
}

/// What a trace session keeps of its records beyond the recording: the whole trace, or
/// (`Options::keep_no_trace`) only the processes running after an exec.
struct Kept<'s> {
    trace: &'s mut Trace,
    running: Option<&'s mut Running>,
}

/// Where a trace session's records go: the recording, if any, then the trace. A process
/// found running when tracing started gets its label from /proc first, and a cgroup id its
/// path when it is first seen.
fn keep(kept: &mut Kept<'_>, writer: Option<&Writer>, names: &mut Names, record: Record) {
    let trace = &mut *kept.trace;
    for f in names.found.first_sight(&record).iter().flatten() {
        if let Some(w) = writer {
            w.found(f);
        }
        trace.found(f);
    }
    let cgroup = record.cgroup_id();
    if cgroup != 0
        && !trace.knows_cgroup(cgroup)
        && let Some(path) = names.cgroups.get(cgroup)
    {
        if let Some(w) = writer {
            w.cgroup(cgroup, path);
        }
        trace.cgroup(cgroup, path);
    }
    // The recording takes the record itself where nothing else keeps it (`record`, whose
    // `Running` only looks at it), and a copy where the trace keeps it too.
    match kept.running.as_deref_mut() {
        Some(running) => {
            running.see(&record);
            if let Some(w) = writer {
                w.record(record);
            }
        }
        None => {
            if let Some(w) = writer {
                w.record(record.clone());
            }
            trace.ingest(record);
        }
    }
}

/// A session that keeps a `Trace` and builds a `Report` from it (run, record), recording it
/// too when asked. Live sessions are another type, `LiveSession`: they keep no trace.
pub struct TraceSession {
    tracer: Tracer,
    writer: Option<Writer>,
    /// Every process seen, unless the session keeps no trace: then only what its
    /// `Running` keeps, and the rest of what a trace holds (labels, cgroups, losses).
    pub trace: Trace,
    running: Option<Running>,
    /// The processes that existed before tracing began (all, or those added with
    /// `trace_pid`), as /proc showed them, and the cgroups' paths.
    names: Names,
    started: Instant,
}

impl TraceSession {
    /// Loads and attaches everything, and creates the recording. Must be called inside the
    /// runtime.
    pub fn start(opts: Options) -> Result<Self> {
        Self::start_in(opts, None)
    }

    /// `start`; with `trace_all`, tracing only the processes of `scope` (`record --cgroup`)
    /// if given.
    pub fn start_in(opts: Options, scope: Option<&CgroupScope>) -> Result<Self> {
        let tracer = Tracer::start(
            opts.trace_all,
            opts.precise_ld,
            opts.ia32_syscalls,
            opts.keep_args,
            scope,
            true,
            opts.pace,
        )?;
        let mut trace = Trace::default();
        // What the atime hint advises on (see `model::mounts`).
        trace.mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|text| parse_mountinfo(&text))
            .unwrap_or_default();
        let writer = match &opts.output {
            Some(path) => {
                let mut meta = host_meta();
                meta.push((
                    "sources".into(),
                    serde_json::to_string(&tracer.loaded.sources()).unwrap_or_default(),
                ));
                meta.push((
                    "mounts".into(),
                    serde_json::to_string(&trace.mounts).unwrap_or_default(),
                ));
                meta.extend(opts.meta);
                Some(Writer::create(
                    path,
                    opts.owner.as_ref(),
                    meta,
                    opts.keep_args,
                )?)
            }
            None => None,
        };
        // Read after the programs are attached: a process missing from it is seen created,
        // or (with a scope) came into the scope later.
        let found = match (opts.trace_all, scope) {
            (true, Some(scope)) => Snapshot::of_scope(scope.dir()),
            (true, None) => Snapshot::all(),
            (false, _) => Snapshot::default(),
        };
        Ok(Self {
            tracer,
            writer,
            trace,
            running: opts.keep_no_trace.then(Running::default),
            names: Names {
                found,
                cgroups: CgroupNames::new(),
            },
            started: Instant::now(),
        })
    }

    /// The seeds of the traced set, for a child to add itself before exec.
    pub fn seeds(&self) -> Result<SeedsMap> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        let map = self
            .tracer
            .loaded
            .ebpf
            .map("SEEDS")
            .context("map SEEDS missing")?;
        let aya::maps::Map::HashMap(data) = map else {
            anyhow::bail!("map SEEDS has an unexpected type");
        };
        let data: &MapData = data;
        Ok(SeedsMap(data.fd().as_fd().as_raw_fd()))
    }

    /// Adds a process that already exists to the traced set (`record -p`, bench), and
    /// reads its label from /proc.
    pub fn trace_pid(&mut self, pid: u32) -> Result<()> {
        self.seeds()?.seed(pid).context("adding it to map SEEDS")?;
        self.names.found.add(&[pid]);
        Ok(())
    }

    /// Collects into the trace (and the recording) until `stop` completes, and returns its
    /// output.
    pub async fn run_until<T>(&mut self, stop: impl Future<Output = T>) -> Result<T> {
        let Self {
            tracer,
            writer,
            trace,
            running,
            names,
            ..
        } = self;
        let writer = writer.as_ref();
        let mut copied = Instant::now();
        let mut kept = Kept {
            trace,
            running: running.as_mut(),
        };
        let route = |traced: Traced| match traced {
            Traced::Record(record) => keep(&mut kept, writer, names, record),
            Traced::InScope(pids) => names.found.add(&pids),
        };
        let tick = |collector: &Collector| {
            let Some(w) = writer else {
                return Ok(());
            };
            // This batch's records go to the writer thread now, in one message.
            w.flush();
            if copied.elapsed() >= LOSS_EVERY {
                w.lost(&collector.losses()?.lost);
                copied = Instant::now();
            }
            Ok(())
        };
        tracer.run_until(stop, route, tick).await
    }

    /// How long since the session started.
    pub fn elapsed_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Stops collecting: takes what is left in the ring buffer, then every loss counter into
    /// `trace.lost`. With a recording, it waits for the writer to commit what it was sent, so
    /// that the records it dropped are counted too.
    pub fn drain(&mut self) -> Result<()> {
        let writer = self.writer.as_ref();
        let names = &mut self.names;
        let mut kept = Kept {
            trace: &mut self.trace,
            running: self.running.as_mut(),
        };
        self.tracer
            .collector
            .drain(&mut |record| keep(&mut kept, writer, names, record));
        // The dynamic-linker records that processes still running hold until their exit.
        let held = match kept.running.as_deref() {
            Some(running) => self.tracer.collector.held_ld(running.0.iter().copied()),
            None => self
                .tracer
                .collector
                .held_ld(kept.trace.running_after_exec()),
        };
        for ld in held {
            keep(&mut kept, writer, names, Record::Ld(ld));
        }
        // Cgroups first seen moments after the hierarchy was last walked.
        for (id, path) in self.names.cgroups.settle() {
            if let Some(w) = writer {
                w.cgroup(id, &path);
            }
            self.trace.cgroup(id, &path);
        }
        let losses = self.tracer.collector.losses()?;
        // Exits without a parent notification: the trace's count is the truth, and the one
        // `summary.exits_without_notify` shows. It counts the exit records that arrived with
        // `notified == 0`, so it matches the processes shown without `exit_teardown`, and a
        // report from the recording gives the same number. The kernel's EXIT_WITHOUT_NOTIFY
        // (`losses.exits_without_notify`) counts the same exits before it sends their record,
        // so it exceeds the trace's count only by those whose record then found the ring
        // buffer full: `ringbuf_full` counts them already, and they are not added again.
        self.trace.lost = LostCounts {
            recording_dropped: self.writer.as_ref().map_or(0, Writer::dropped),
            ..losses.lost
        };
        Ok(())
    }

    /// The report of what was collected, as `run` shows it; `group_rows` as
    /// `Context::group_rows` (the table's `--top`).
    pub fn report(
        &self,
        command: Vec<String>,
        exit: Option<ExitStatus>,
        wall_ns: u64,
        group_rows: Option<usize>,
    ) -> Report {
        let loaders = InterpCache::default();
        let is_static = |p: &[u8]| loaders.is_static(p);
        Report::build(
            &self.trace,
            &Context {
                command,
                exit,
                wall_ns,
                sources: self.tracer.sources(),
                group_rows,
                ..Context::for_run(&is_static)
            },
        )
    }

    /// Completes the recording, if any, with the derived tables (the rows of `report`) and
    /// the final meta.
    pub fn finish(self, report: &Report, meta: Vec<(String, String)>) -> Result<()> {
        let meta = self.final_meta(meta);
        if let Some(w) = self.writer {
            w.finish(&self.trace.lost, report, meta)?;
        }
        Ok(())
    }

    /// Completes the recording with the final meta and the derived tables, which the
    /// writer derives from the file (as for a session that kept no trace); returns the
    /// processes in them (0 without a recording). Once `give_up` is set, the derivation
    /// stops and the file is left without those tables (an error says so).
    pub fn finish_from_file(
        self,
        meta: Vec<(String, String)>,
        give_up: Arc<AtomicBool>,
    ) -> Result<u64> {
        let meta = self.final_meta(meta);
        let Self {
            tracer,
            writer,
            trace,
            ..
        } = self;
        // Tracing has ended: the programs go before the file is read back, which takes
        // about as long as a `report` of it.
        drop(tracer);
        match writer {
            Some(w) => w.finish_from_file(&trace.lost, meta, give_up),
            None => Ok(0),
        }
    }

    /// `meta` with what every finished recording adds.
    fn final_meta(&self, mut meta: Vec<(String, String)>) -> Vec<(String, String)> {
        meta.push(("ended_ns".into(), monotonic_ns().to_string()));
        // Again: hooks attached on demand since the start change them.
        meta.push((
            "sources".into(),
            serde_json::to_string(&self.tracer.loaded.sources()).unwrap_or_default(),
        ));
        meta
    }
}

/// What a live session has to show after an interval.
pub struct Sweep {
    /// The processes finished since the last sweep.
    pub done: Vec<Finished>,
    pub counters: Counters,
    /// Processes being followed now.
    pub in_flight: usize,
    /// Lost events since start.
    pub lost: u64,
}

/// A system-wide session that feeds the live aggregator (top, monitor).
pub struct LiveSession {
    tracer: Tracer,
    live: Live,
    /// Every process that existed before tracing began, as /proc showed it.
    found: Snapshot,
    /// The paths of cgroup ids, named when first seen (as `keep` does).
    cgroups: CgroupNames,
    loaders: InterpCache,
    /// When `sweep` last looked for processes that vanished unfinished (0: not yet), or
    /// None where it cannot (`pids_are_the_kernels`).
    vanish_checked_ns: Option<u64>,
}

/// How often a live session looks for processes whose exit never came
/// (`Live::forget_vanished`): each is forgotten at the second look that finds its pid gone.
const VANISH_CHECK_NS: u64 = 60_000_000_000;

/// The inode of the initial pid namespace (the kernel's `PROC_PID_INIT_INO`).
const INIT_PID_NS_INO: u64 = 0xEFFF_FFFC;

/// Whether /proc shows the pids the kernel's records carry (those of the initial pid
/// namespace): not inside a container with its own pid namespace, where /proc/PID would
/// say that every process on the host is gone.
fn pids_are_the_kernels() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == INIT_PID_NS_INO)
}

/// Where a live session's records go: the live aggregator, after the label from /proc of a
/// process found running when tracing started, and the path of a cgroup id first seen.
fn feed(live: &mut Live, found: &mut Snapshot, cgroups: &mut CgroupNames, record: Record) {
    for f in found.first_sight(&record).iter().flatten() {
        live.found(f);
    }
    let cgroup = record.cgroup_id();
    if cgroup != 0
        && !live.knows_cgroup(cgroup)
        && let Some(path) = cgroups.get(cgroup)
    {
        live.cgroup(cgroup, path);
    }
    live.ingest(record);
}

impl LiveSession {
    /// Loads and attaches everything. Must be called inside the runtime.
    pub fn start() -> Result<Self> {
        Self::start_in(None, false, Ia32Syscalls::default())
    }

    /// `start`, tracing only the processes of `scope` (`top/monitor --cgroup`) if given;
    /// `ia32_syscalls`: `--ia32-syscalls`.
    pub fn start_in(
        scope: Option<&CgroupScope>,
        announce: bool,
        ia32_syscalls: Ia32Syscalls,
    ) -> Result<Self> {
        // The live views show no arguments: the kernel need not read them.
        let tracer = Tracer::start(
            true,
            false,
            ia32_syscalls,
            false,
            scope,
            announce,
            Pace::LIVE,
        )?;
        Ok(Self {
            tracer,
            live: Live::default(),
            // After the programs are attached: a process missing from it is seen created, or
            // (with a scope) came into the scope later.
            found: match scope {
                Some(scope) => Snapshot::of_scope(scope.dir()),
                None => Snapshot::all(),
            },
            cgroups: CgroupNames::new(),
            loaders: InterpCache::default(),
            vanish_checked_ns: pids_are_the_kernels().then_some(0),
        })
    }

    /// Collects into the live aggregator until `stop` completes, then takes what is queued
    /// in the ring buffer, and returns its output. The collector polls the ring buffer only
    /// once its poll interval (`Pace::LIVE`, a second) has passed inside one call, so a
    /// caller whose `stop` is shorter (`monitor` updates every 500 ms, the TUI reads keys
    /// every 50 ms) would otherwise see records only when the kernel wakes the agent, at
    /// 256 KiB: seconds late at a low rate.
    pub async fn run_until<T>(&mut self, stop: impl Future<Output = T>) -> Result<T> {
        let (live, found, cgroups) = (&mut self.live, &mut self.found, &mut self.cgroups);
        let out = self
            .tracer
            .run_until(
                stop,
                |traced| match traced {
                    Traced::Record(record) => feed(live, found, cgroups, record),
                    Traced::InScope(pids) => found.add(&pids),
                },
                |_| Ok(()),
            )
            .await?;
        self.drain();
        Ok(out)
    }

    /// Hands whatever is in the ring buffer now to the live aggregator, without waiting.
    fn drain(&mut self) {
        let (live, found, cgroups) = (&mut self.live, &mut self.found, &mut self.cgroups);
        self.tracer
            .collector
            .drain(&mut |record| feed(live, found, cgroups, record));
    }

    /// Takes what is queued, finishes the processes that are done by now, and reads the loss
    /// counters.
    pub fn sweep(&mut self) -> Result<Sweep> {
        self.drain();
        // Cgroups first seen moments after the hierarchy was last walked.
        for (id, path) in self.cgroups.settle() {
            self.live.cgroup(id, &path);
        }
        let lost = self.tracer.collector.losses()?.lost.total();
        let loaders = &self.loaders;
        let now = monotonic_ns();
        let done = self.live.sweep(now, &|p| loaders.is_static(p));
        if let Some(checked) = self.vanish_checked_ns
            && now.saturating_sub(checked) >= VANISH_CHECK_NS
        {
            self.vanish_checked_ns = Some(now);
            self.live
                .forget_vanished(&|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        }
        Ok(Sweep {
            done,
            counters: self.live.counters.clone(),
            in_flight: self.live.in_flight(),
            lost,
        })
    }
}
