//! Every process of a trace, one at a time in creation order, with its binaries and phases
//! as the report counts them: what per-process outputs (`export --parquet`, `report --format
//! csv --processes`) are made of.
use super::phases::{Phases, atime_updates};
use super::report::escape;
use super::trace::{Binaries, ExitStatus};
use super::{Process, Trace};

/// The columns of a process row before its phases, in order (docs/recording.md, "Parquet
/// export"); each phase follows, named as the phase, in report order.
pub const COLUMNS: [&str; 15] = [
    "host",
    "pid",
    "start_ns",
    "parent_pid",
    "parent_start_ns",
    "binary",
    "parent_binary",
    "method",
    "cgroup",
    "unit",
    "exit_code",
    "exit_signal",
    "execs",
    "failed_execs",
    "atime_updates",
];

/// The values of `COLUMNS` after `host`, for one process (None: null, "not known"). Integers
/// are signed, as Spark and Trino have no unsigned ones.
pub struct Fields<'v> {
    pub pid: i32,
    pub start_ns: i64,
    pub parent_pid: Option<i32>,
    pub parent_start_ns: Option<i64>,
    /// Escaped as the report's paths are (`\xNN`, `\\`).
    pub binary: String,
    pub parent_binary: String,
    pub method: &'static str,
    pub cgroup: Option<&'v str>,
    pub unit: Option<&'v str>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub execs: i64,
    pub failed_execs: i64,
    pub atime_updates: i64,
}

/// A u64 from the kernel as a signed integer (ns values reach i64::MAX after 292 years).
pub fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// One process and what the report derives from it.
pub struct ProcessView<'a> {
    pub process: &'a Process,
    /// Its binary when created (`parent_binary`) and the one it ran last (`binary`).
    pub binaries: Binaries,
    pub phases: Phases,
    /// Successful execs.
    pub execs: u64,
    /// Failed exec attempts (each directory of a PATH search, say).
    pub failed_execs: u64,
    /// Its cgroup as `report --by cgroup` names it, and its unit (`--by unit`); None when
    /// the kernel gave no cgroup id.
    pub cgroup: Option<(String, String)>,
}

/// Whether `p`'s phases are those of a static binary: it exec'd, and its last binary
/// (`last`) has no ELF interpreter. The dynamic-linker phases of such a process are 0, not
/// unmeasured (see `Phases::of`).
pub fn is_static(p: &Process, last: &[u8], is_static_binary: &dyn Fn(&[u8]) -> bool) -> bool {
    p.execs.iter().any(|e| e.errno == 0) && is_static_binary(last)
}

impl<'a> ProcessView<'a> {
    /// Process `p` of `trace` (which names its cgroup), whose binaries are `binaries`.
    pub fn of(
        trace: &Trace,
        process: &'a Process,
        binaries: Binaries,
        is_static_binary: &dyn Fn(&[u8]) -> bool,
    ) -> Self {
        let phases = Phases::of(
            process,
            is_static(process, &binaries.last, is_static_binary),
        );
        Self::with_phases(trace, process, binaries, phases)
    }

    /// The same, with its phases already computed (`Phases::of`, as the report's builder
    /// does for each process it adds).
    pub fn with_phases(
        trace: &Trace,
        process: &'a Process,
        binaries: Binaries,
        phases: Phases,
    ) -> Self {
        let ok = process.execs.iter().filter(|e| e.errno == 0).count() as u64;
        let cgroup = (process.cgroup_id() != 0).then(|| {
            let path = String::from_utf8_lossy(&super::cgroup::label(trace, process)).into_owned();
            let unit = super::cgroup::unit_of(&path);
            (path, unit)
        });
        ProcessView {
            process,
            binaries,
            phases,
            execs: ok,
            failed_execs: process.execs.len() as u64 - ok,
            cgroup,
        }
    }

    /// Its row's values before the phases.
    pub fn fields(&self) -> Fields<'_> {
        let p = self.process;
        let (exit_code, exit_signal) = match p.exit_status() {
            Some(ExitStatus::Code(c)) => (Some(c), None),
            Some(ExitStatus::Signal(s)) => (None, Some(s)),
            None => (None, None),
        };
        Fields {
            // pid_max is at most 2^22, so a pid always fits.
            pid: p.key.pid as i32,
            start_ns: p.key.stored_start_ns(),
            parent_pid: p.parent.map(|k| k.pid as i32),
            parent_start_ns: p.parent.map(|k| k.stored_start_ns()),
            binary: escape(&self.binaries.last),
            parent_binary: escape(&self.binaries.at_spawn),
            method: p.method.name(),
            cgroup: self.cgroup.as_ref().map(|(path, _)| path.as_str()),
            unit: self.cgroup.as_ref().map(|(_, unit)| unit.as_str()),
            exit_code,
            exit_signal,
            execs: signed(self.execs),
            failed_execs: signed(self.failed_execs),
            atime_updates: signed(atime_updates(p)),
        }
    }
}

/// The trace's processes in creation order (`Trace::by_start`), each with its binaries
/// (`Trace::binaries`) and phases (`Phases::of`). `is_static_binary` says whether the binary
/// at a path is statically linked. The order and the binaries are computed up front (they
/// need the whole tree); each process's phases only when it is reached.
pub fn in_order<'a>(
    trace: &'a Trace,
    is_static_binary: &'a dyn Fn(&[u8]) -> bool,
) -> impl ExactSizeIterator<Item = ProcessView<'a>> + 'a {
    let order = trace.by_start();
    let binaries = trace.binaries(&order);
    order.into_iter().map(move |i| {
        ProcessView::of(
            trace,
            &trace.processes[i],
            binaries[i].clone(),
            is_static_binary,
        )
    })
}
