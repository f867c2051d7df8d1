//! Recordings: an SQLite database (WAL mode) that stores every record the kernel sent, one
//! row each, so a report can be rebuilt later from exactly what was seen. The schema is in
//! `SCHEMA` and documented in docs/recording.md.
pub mod reader;
pub mod writer;

pub use reader::{Recording, RecordingError};
pub use writer::Writer;

/// Bumped on any incompatible change; a reader refuses newer versions and reads older ones.
/// 2: `lds.static_start_ns`, `execs.child_run_ns`, `exits.child_run_ns`.
/// 3: `execs.cow_fault_ns`, `exits.cow_fault_ns`.
/// 4: the `found` table (processes that existed before tracing, labelled from /proc).
/// 5: `spawns.cgroup_id`, `execs.cgroup_id` and the `cgroups` table (id -> path).
/// 6: `exits.cgroup_id`.
/// 7: `lds.objects`.
/// 8: a process first seen mid-life is stored with minus its start time, where it was 0
///    (two such processes with one pid were one), and `found.start_ns`.
pub const RECORDING_SCHEMA: u32 = 8;

pub const SCHEMA: &str = include_str!("schema.sql");

/// `ld_outcome` codes as stored.
pub fn ld_outcome_name(code: u32) -> &'static str {
    match code {
        forkprof_common::ld_outcome::COMPLETE => "complete",
        forkprof_common::ld_outcome::NO_GLIBC_LD => "no_glibc_ld",
        _ => "incomplete",
    }
}

pub fn ld_outcome_code(name: &str) -> u32 {
    match name {
        "complete" => forkprof_common::ld_outcome::COMPLETE,
        "no_glibc_ld" => forkprof_common::ld_outcome::NO_GLIBC_LD,
        _ => forkprof_common::ld_outcome::INCOMPLETE,
    }
}

#[cfg(test)]
mod equivalence;
