//! Every process of a trace, one at a time in creation order, with its binaries and phases
//! as the report counts them: what per-process outputs (`export --parquet`) are made of.
use super::phases::Phases;
use super::trace::Binaries;
use super::{Process, Trace};

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
