//! Renderers of a `Report`.
pub mod bench;
pub mod csv;
pub mod diff;
pub mod flamegraph;
pub mod json;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod perfetto;
pub mod prometheus;
pub mod table;
pub mod tui;
pub mod width;

pub use crate::units::duration;
