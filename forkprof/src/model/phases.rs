//! The phases of a spawn, with one name each, used alike in kernel comments, JSON keys, the
//! report and the README.
use forkprof_common::ld_outcome;
use serde::Serialize;

use super::{Method, Process};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
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

pub const PHASES: [Phase; 17] = [
    Phase::Fork,
    Phase::PagetableCopy,
    Phase::VforkWait,
    Phase::ChildRun,
    Phase::Exec,
    Phase::ExecPrepare,
    Phase::ExecLoad,
    Phase::ExecFailed,
    Phase::StaticStart,
    Phase::LdStart,
    Phase::LdMap,
    Phase::LdRelocInit,
    Phase::Atime,
    Phase::CowFaults,
    Phase::CowFaultTime,
    Phase::ExitTeardown,
    Phase::SpawnCost,
];

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Self::Fork => "fork",
            Self::PagetableCopy => "pagetable_copy",
            Self::VforkWait => "vfork_wait",
            Self::ChildRun => "child_run",
            Self::Exec => "exec",
            Self::ExecPrepare => "exec_prepare",
            Self::ExecLoad => "exec_load",
            Self::ExecFailed => "exec_failed",
            Self::StaticStart => "static_start",
            Self::LdStart => "ld_start",
            Self::LdMap => "ld_map",
            Self::LdRelocInit => "ld_reloc_init",
            Self::Atime => "atime",
            Self::CowFaults => "cow_faults",
            Self::CowFaultTime => "cow_fault_time",
            Self::ExitTeardown => "exit_teardown",
            Self::SpawnCost => "spawn_cost",
        }
    }

    /// `cow_faults` is a count; every other phase is a duration in nanoseconds.
    pub fn is_count(self) -> bool {
        self == Self::CowFaults
    }

    /// The phases whose sum is `spawn_cost` (they do not overlap in time).
    pub const SPAWN_COST_PARTS: [Phase; 8] = [
        Phase::Fork,
        Phase::Exec,
        Phase::ExecFailed,
        Phase::StaticStart,
        Phase::LdStart,
        Phase::LdMap,
        Phase::LdRelocInit,
        Phase::ExitTeardown,
    ];
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
    /// the dynamic linker phases are 0 rather than unmeasured, and the time to its first
    /// `arch_prctl(ARCH_SET_FS)` is `static_start`. A dynamic binary whose glibc ld.so was
    /// measured has a `static_start` of 0.
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
                ph.add(Phase::StaticStart, 0);
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
