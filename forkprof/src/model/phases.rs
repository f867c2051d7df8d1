//! The phases of a spawn, with one name each, used alike in kernel comments, JSON keys, the
//! report and the README.
use forkprof_common::ld_outcome;
use serde::{Serialize, Serializer, ser::SerializeMap};

use super::{Method, Process};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Fork,
    PagetableCopy,
    VforkWait,
    ChildRun,
    Exec,
    ExecPrepare,
    ExecLoad,
    ExecFailed,
    StaticStart,
    LdStart,
    LdMap,
    LdRelocInit,
    Atime,
    CowFaults,
    CowFaultTime,
    ExitTeardown,
    SpawnCost,
}

/// Everything forkprof knows about one phase. `TABLE` lists them in report order; every
/// phase list elsewhere (spawn_cost's parts, table columns, what can explain a bench ratio)
/// is derived from it, and the kernel hooks that feed each phase are in `loader::JOBS`.
pub struct PhaseDef {
    pub phase: Phase,
    /// The one name of the phase: JSON keys, the report, recordings, the README.
    pub name: &'static str,
    /// A count (of faults), not a duration in nanoseconds.
    pub count: bool,
    /// One of the parts whose sum is `spawn_cost` (they do not overlap in time).
    pub spawn_cost: bool,
    /// A column of the per-binary and per-parent phase tables.
    pub breakdown: bool,
    /// A part that can explain a `forkprof bench` ratio (`ld_start` includes `static_start`
    /// there: both are the C library's start-up).
    pub explains: bool,
    /// A column of `forkprof bench`'s table.
    pub bench_column: bool,
}

const fn def(phase: Phase, name: &'static str, flags: [bool; 5]) -> PhaseDef {
    let [spawn_cost, breakdown, explains, bench_column, count] = flags;
    PhaseDef {
        phase,
        name,
        count,
        spawn_cost,
        breakdown,
        explains,
        bench_column,
    }
}

// Flags: [spawn_cost, breakdown, explains, bench_column, count].
const Y: bool = true;
const N: bool = false;

pub const TABLE: [PhaseDef; 17] = [
    def(Phase::Fork, "fork", [Y, Y, Y, Y, N]),
    def(Phase::PagetableCopy, "pagetable_copy", [N, Y, N, Y, N]),
    def(Phase::VforkWait, "vfork_wait", [N, N, N, Y, N]),
    def(Phase::ChildRun, "child_run", [N, Y, Y, Y, N]),
    def(Phase::Exec, "exec", [Y, Y, Y, N, N]),
    def(Phase::ExecPrepare, "exec_prepare", [N, N, N, Y, N]),
    def(Phase::ExecLoad, "exec_load", [N, N, N, Y, N]),
    def(Phase::ExecFailed, "exec_failed", [Y, Y, Y, N, N]),
    def(Phase::StaticStart, "static_start", [Y, Y, N, Y, N]),
    def(Phase::LdStart, "ld_start", [Y, Y, Y, Y, N]),
    def(Phase::LdMap, "ld_map", [Y, Y, Y, Y, N]),
    def(Phase::LdRelocInit, "ld_reloc_init", [Y, Y, Y, Y, N]),
    def(Phase::Atime, "atime", [N, N, N, N, N]),
    def(Phase::CowFaults, "cow_faults", [N, Y, N, Y, Y]),
    def(Phase::CowFaultTime, "cow_fault_time", [N, N, N, N, N]),
    def(Phase::ExitTeardown, "exit_teardown", [Y, Y, Y, Y, N]),
    def(Phase::SpawnCost, "spawn_cost", [N, N, N, N, N]),
];

/// Every phase, in report order.
pub const PHASES: [Phase; TABLE.len()] = {
    let mut out = [Phase::Fork; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        // The table is indexed by the enum's discriminant.
        assert!(TABLE[i].phase as usize == i);
        out[i] = TABLE[i].phase;
        i += 1;
    }
    out
};

/// A subset of the phases, by one of `PhaseDef`'s flags.
#[derive(Clone, Copy)]
enum Set {
    SpawnCost,
    Breakdown,
    Explains,
    BenchColumn,
}

/// The phases of `set` in report order; `M` must be their number (checked at compile time).
const fn members<const M: usize>(set: Set) -> [Phase; M] {
    let mut out = [Phase::Fork; M];
    let (mut i, mut n) = (0, 0);
    while i < TABLE.len() {
        let d = &TABLE[i];
        let member = match set {
            Set::SpawnCost => d.spawn_cost,
            Set::Breakdown => d.breakdown,
            Set::Explains => d.explains,
            Set::BenchColumn => d.bench_column,
        };
        if member {
            out[n] = d.phase;
            n += 1;
        }
        i += 1;
    }
    assert!(n == M);
    out
}

impl Phase {
    pub fn def(self) -> &'static PhaseDef {
        &TABLE[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The phase named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE.iter().find(|d| d.name == name).map(|d| d.phase)
    }

    /// How `spawn_cost` is made, for the `source` column: no hook measures it.
    pub fn spawn_cost_source() -> String {
        let parts: Vec<&str> = Self::SPAWN_COST_PARTS.iter().map(|p| p.name()).collect();
        format!("derived: {}", parts.join(" + "))
    }

    /// `cow_faults` is a count; every other phase is a duration in nanoseconds.
    pub fn is_count(self) -> bool {
        self.def().count
    }

    /// The phases whose sum is `spawn_cost`.
    pub const SPAWN_COST_PARTS: [Phase; 8] = members(Set::SpawnCost);
    /// The columns of the per-binary and per-parent phase tables.
    pub const BREAKDOWN: [Phase; 11] = members(Set::Breakdown);
    /// What can explain a `forkprof bench` ratio.
    pub const EXPLAINING: [Phase; 8] = members(Set::Explains);
    /// The phase columns of `forkprof bench`'s table.
    pub const BENCH_COLUMNS: [Phase; 12] = members(Set::BenchColumn);
}

impl Serialize for Phase {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A value per phase, looked up by `Phase`. It serializes as a JSON object keyed by phase
/// name in name order, with absent phases left out.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseMap<V>([Option<V>; PHASES.len()]);

impl<V> Default for PhaseMap<V> {
    fn default() -> Self {
        Self(std::array::from_fn(|_| None))
    }
}

impl<V> PhaseMap<V> {
    pub fn get(&self, phase: Phase) -> Option<&V> {
        self.0[phase as usize].as_ref()
    }

    pub fn insert(&mut self, phase: Phase, value: V) {
        self.0[phase as usize] = Some(value);
    }

    pub fn get_mut(&mut self, phase: Phase) -> Option<&mut V> {
        self.0[phase as usize].as_mut()
    }

    /// Present phases, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (Phase, &V)> {
        PHASES
            .iter()
            .filter_map(|&p| self.0[p as usize].as_ref().map(|v| (p, v)))
    }

    /// Present phases, in name order (as in JSON).
    pub fn iter_by_name(&self) -> impl Iterator<Item = (Phase, &V)> {
        let mut present: Vec<(Phase, &V)> = self.iter().collect();
        present.sort_by_key(|(p, _)| p.name());
        present.into_iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }
}

impl<V> FromIterator<(Phase, V)> for PhaseMap<V> {
    fn from_iter<I: IntoIterator<Item = (Phase, V)>>(items: I) -> Self {
        let mut map = Self::default();
        for (p, v) in items {
            map.insert(p, v);
        }
        map
    }
}

impl<V: Serialize> Serialize for PhaseMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (phase, v) in self.iter_by_name() {
            map.serialize_entry(phase.name(), v)?;
        }
        map.end()
    }
}

/// One process's phase values; `None` means "not measured" (never a silent 0).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Phases(pub [Option<u64>; PHASES.len()]);

impl Phases {
    pub fn get(&self, phase: Phase) -> Option<u64> {
        self.0[phase as usize]
    }

    fn set(&mut self, phase: Phase, value: Option<u64>) {
        self.0[phase as usize] = value;
    }

    fn add(&mut self, phase: Phase, value: u64) {
        let slot = &mut self.0[phase as usize];
        *slot = Some(slot.unwrap_or(0).saturating_add(value));
    }

    /// `static_binary`: the process's last binary is known to have no ELF interpreter, so
    /// the dynamic linker phases are 0 rather than unmeasured, and the end of its libc's
    /// start-up gives `static_start`. A dynamic binary has no `static_start`: it does not
    /// apply there, so it is not counted for it.
    pub fn of(p: &Process, static_binary: bool) -> Self {
        let mut ph = Self::default();
        if let Some(s) = &p.spawn {
            ph.set(Phase::Fork, Some(s.fork_ns));
            if p.method.copies_address_space() {
                ph.set(Phase::PagetableCopy, Some(s.pagetable_copy_ns));
            }
            if matches!(p.method, Method::Vfork | Method::PosixSpawn) {
                ph.set(Phase::VforkWait, Some(s.vfork_wait_ns));
            }
        }
        let mut cow = p.spawn.as_ref().map(|_| 0u64);
        let mut cow_ns = 0u64;
        // 0 is "not measured" (a process that was not a fork child while traced).
        ph.set(
            Phase::ChildRun,
            (p.child_run_ns > 0).then_some(p.child_run_ns),
        );
        for e in &p.execs {
            if e.errno == 0 {
                ph.add(Phase::Exec, e.exec_ns);
                ph.add(Phase::ExecPrepare, e.exec_prepare_ns);
                ph.add(Phase::ExecLoad, e.exec_load_ns);
                cow = Some(cow.unwrap_or(0).saturating_add(e.cow_faults));
                cow_ns = cow_ns.saturating_add(e.cow_fault_ns);
            } else {
                ph.add(Phase::ExecFailed, e.exec_ns);
            }
            if e.atime_count > 0 {
                ph.add(Phase::Atime, e.atime_ns);
            }
        }
        for ld in &p.lds {
            if ld.outcome == ld_outcome::COMPLETE {
                ph.add(Phase::LdStart, ld.ld_start_ns);
                ph.add(Phase::LdMap, ld.ld_map_ns);
                ph.add(Phase::LdRelocInit, ld.ld_reloc_init_ns);
            }
            if ld.outcome == ld_outcome::NO_GLIBC_LD && static_binary && ld.static_start_ns > 0 {
                ph.add(Phase::StaticStart, ld.static_start_ns);
            }
            if ld.atime_count > 0 {
                ph.add(Phase::Atime, ld.atime_ns);
            }
        }
        if static_binary && p.execs.iter().any(|e| e.errno == 0) {
            for phase in [Phase::LdStart, Phase::LdMap, Phase::LdRelocInit] {
                if ph.get(phase).is_none() {
                    ph.set(phase, Some(0));
                }
            }
        }
        if let Some(x) = &p.exit {
            cow = cow.map(|c| c.saturating_add(x.cow_faults));
            cow_ns = cow_ns.saturating_add(x.cow_fault_ns);
            if x.notified {
                ph.set(Phase::ExitTeardown, Some(x.exit_teardown_ns));
            }
        }
        if p.method.copies_address_space() {
            ph.set(Phase::CowFaults, cow);
            // Only where do_wp_page could be hooked; 0 reads as not measured.
            ph.set(Phase::CowFaultTime, (cow_ns > 0).then_some(cow_ns));
        }
        let parts: Vec<u64> = Phase::SPAWN_COST_PARTS
            .iter()
            .filter_map(|&phase| ph.get(phase))
            .collect();
        if !parts.is_empty() {
            ph.set(
                Phase::SpawnCost,
                Some(parts.iter().fold(0u64, |a, &b| a.saturating_add(b))),
            );
        }
        ph
    }
}

/// The number of atime updates (inode dirtied) a process caused in exec and ld.so.
pub fn atime_updates(p: &Process) -> u64 {
    let execs: u64 = p.execs.iter().map(|e| u64::from(e.atime_count)).sum();
    let lds: u64 = p.lds.iter().map(|l| u64::from(l.atime_count)).sum();
    execs.saturating_add(lds)
}

#[cfg(test)]
mod table_tests {
    use super::*;

    #[test]
    fn every_phase_has_one_name_and_back() {
        for (i, d) in TABLE.iter().enumerate() {
            assert_eq!(d.phase as usize, i);
            assert_eq!(Phase::from_name(d.name), Some(d.phase));
            assert_eq!(TABLE.iter().filter(|e| e.name == d.name).count(), 1);
        }
        assert_eq!(Phase::from_name("nosuch"), None);
    }

    #[test]
    fn derived_sets_keep_report_order() {
        let names = |set: &[Phase]| set.iter().map(|p| p.name()).collect::<Vec<_>>().join(",");
        assert_eq!(
            names(&Phase::SPAWN_COST_PARTS),
            "fork,exec,exec_failed,static_start,ld_start,ld_map,ld_reloc_init,exit_teardown"
        );
        assert_eq!(
            names(&Phase::EXPLAINING),
            "fork,child_run,exec,exec_failed,ld_start,ld_map,ld_reloc_init,exit_teardown"
        );
        assert!(Phase::CowFaults.is_count() && !Phase::CowFaultTime.is_count());
        // spawn_cost's source says how it is made, not "the phases above" (the table lists
        // child_run and cow_faults above it, which are not part of it).
        assert_eq!(
            Phase::spawn_cost_source(),
            "derived: fork + exec + exec_failed + static_start + ld_start + ld_map + \
             ld_reloc_init + exit_teardown"
        );
    }

    #[test]
    fn phase_maps_serialize_by_name_and_skip_absent_phases() {
        let map: PhaseMap<u64> = [(Phase::SpawnCost, 3), (Phase::Fork, 1), (Phase::Atime, 2)]
            .into_iter()
            .collect();
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            r#"{"atime":2,"fork":1,"spawn_cost":3}"#
        );
        let order: Vec<Phase> = map.iter().map(|(p, _)| p).collect();
        assert_eq!(order, [Phase::Fork, Phase::Atime, Phase::SpawnCost]);
        assert_eq!(map.get(Phase::Exec), None);
    }
}
