//! A tracing session: the loaded programs, the collector, the in-memory trace, the optional
//! recording and the optional `--precise-ld` probes, driven until a stop condition.
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use forkprof_common::{ProcKey, ProcState};

use crate::collector::{Collector, Sink};
use crate::ldprobes::LdProbes;
use crate::loader::{self, LoadOptions, Loaded};
use crate::model::{Report, Trace, live::Live};
use crate::privilege::InvokingUser;
use crate::recording::Writer;

/// What a session traces and where it records. The default: the processes added to it (and
/// their descendants), nothing recorded.
#[derive(Default)]
pub struct Options {
    pub trace_all: bool,
    pub precise_ld: bool,
    /// Record to this SQLite file.
    pub output: Option<PathBuf>,
    pub keep_args: bool,
    pub owner: Option<InvokingUser>,
    /// Stored in the recording's meta table at once.
    pub meta: Vec<(String, String)>,
}

pub struct Session {
    loaded: Loaded,
    collector: Collector,
    ld_probes: Option<LdProbes>,
    writer: Option<Writer>,
    pub trace: Trace,
    /// When set (top, monitor), records feed this instead of `trace`.
    pub live: Option<Live>,
    pub started: Instant,
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

impl Session {
    /// Loads and attaches everything. Must be called inside a tokio runtime.
    pub fn start(opts: Options) -> Result<Self> {
        let mut loaded = loader::load(&LoadOptions {
            trace_all: opts.trace_all,
            precise_ld: opts.precise_ld,
            ..Default::default()
        })?;
        let ld_probes = if opts.precise_ld {
            Some(LdProbes::new(&mut loaded.ebpf).context("--precise-ld")?)
        } else {
            None
        };
        let collector = Collector::new(&mut loaded.ebpf)?;
        let writer = match &opts.output {
            Some(path) => {
                let mut meta = host_meta();
                meta.push((
                    "sources".into(),
                    serde_json::to_string(&loaded.sources()).unwrap_or_default(),
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
        let mut trace = Trace::default();
        if ld_probes.is_some() {
            trace.new_execs = Some(Vec::new());
        }
        Ok(Self {
            loaded,
            collector,
            ld_probes,
            writer,
            trace,
            live: None,
            started: Instant::now(),
        })
    }

    /// A system-wide session whose records feed a live aggregator (top, monitor).
    pub fn start_live() -> Result<Self> {
        let mut session = Self::start(Options {
            trace_all: true,
            ..Default::default()
        })?;
        session.live = Some(Live::default());
        Ok(session)
    }

    /// The raw fd of the traced-process map, for a child to add itself before exec.
    pub fn procs_fd(&self) -> Result<i32> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        let map = self.loaded.ebpf.map("PROCS").context("map PROCS missing")?;
        let aya::maps::Map::HashMap(data) = map else {
            anyhow::bail!("map PROCS has an unexpected type");
        };
        let data: &MapData = data;
        Ok(data.fd().as_fd().as_raw_fd())
    }

    /// Adds a process that already exists to the traced set (`record -p`).
    pub fn trace_pid(&mut self, pid: u32) -> Result<()> {
        let map = self
            .loaded
            .ebpf
            .map_mut("PROCS")
            .context("map PROCS missing")?;
        let mut procs: BpfHashMap<&mut MapData, u32, ProcState> = BpfHashMap::try_from(map)?;
        let state = ProcState {
            key: ProcKey {
                start_ns: 0,
                pid,
                _pad: 0,
            },
            ..Default::default()
        };
        procs.insert(pid, state, 0)?;
        Ok(())
    }

    /// Collects until `stop` completes, and returns its output.
    pub async fn run_until<T>(&mut self, stop: impl Future<Output = T>) -> Result<T> {
        tokio::pin!(stop);
        let mut last_losses = Instant::now();
        loop {
            let mut sink = Sink {
                trace: &mut self.trace,
                live: self.live.as_mut(),
                writer: self.writer.as_ref(),
            };
            tokio::select! {
                out = &mut stop => return Ok(out),
                r = self.collector.collect(&mut sink) => r?,
            }
            if let (Some(probes), Some(log)) =
                (self.ld_probes.as_mut(), self.trace.new_execs.as_mut())
            {
                for (pid, path) in log.drain(..) {
                    probes.on_exec(&mut self.loaded.ebpf, pid, &path);
                }
            }
            if let Some(w) = &self.writer
                && last_losses.elapsed() >= LOSS_EVERY
            {
                self.collector.read_losses(&mut self.trace)?;
                w.lost(&self.trace.lost);
                last_losses = Instant::now();
            }
        }
    }

    /// The kernel's loss counters now (also kept in `trace.lost`).
    pub fn losses(&mut self) -> Result<u64> {
        self.collector.read_losses(&mut self.trace)?;
        Ok(self.trace.lost.total())
    }

    /// Takes what is left in the ring buffer and the final loss counters.
    pub fn drain(&mut self) -> Result<()> {
        let mut sink = Sink {
            trace: &mut self.trace,
            live: self.live.as_mut(),
            writer: self.writer.as_ref(),
        };
        self.collector.drain(&mut sink);
        self.collector.read_losses(&mut self.trace)
    }

    pub fn sources(&self) -> std::collections::BTreeMap<&'static str, String> {
        let mut sources = self.loaded.sources();
        if let Some(probes) = &self.ld_probes {
            for phase in ["ld_start", "ld_map", "ld_reloc_init"] {
                sources.insert(phase, probes.describe());
            }
        }
        sources
    }

    /// Completes the recording, if any, with the derived tables and final meta.
    pub fn finish(self, report: &Report, mut meta: Vec<(String, String)>) -> Result<()> {
        if let Some(w) = self.writer {
            meta.push(("ended_ns".into(), monotonic_ns().to_string()));
            w.finish(&self.trace, report, meta)?;
        }
        Ok(())
    }
}
