//! The pure model: records in, numbers out. Nothing here touches the kernel, so all of it is
//! unit-tested from synthetic records.
pub mod assemble;
pub mod bench;
pub mod cgroup;
pub mod diff;
pub mod hints;
pub mod live;
pub mod method;
pub mod mounts;
pub mod phases;
pub mod processes;
pub mod report;
pub mod stats;
pub mod top;
pub mod trace;

pub use method::Method;
pub use phases::{PHASES, Phases};
pub use report::Report;
pub use trace::{Process, Trace};

#[cfg(test)]
mod tests;
#[cfg(test)]
pub mod tests_support;
