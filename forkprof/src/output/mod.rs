//! Renderers of a `Report`.
pub mod bench;
pub mod csv;
pub mod flamegraph;
pub mod json;
pub mod perfetto;
pub mod prometheus;
pub mod table;
pub mod tui;

pub use crate::units::duration;
