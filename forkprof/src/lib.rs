//! forkprof as a library: the binary (`main.rs`) only parses and dispatches. Everything that
//! turns kernel records into numbers (`decode`, `model`, `output`) is usable, and tested,
//! without root; the rest loads and drives the eBPF programs.
pub mod btf;
pub mod capabilities;
pub mod cgroups;
pub mod cli;
pub mod cmd;
pub mod collector;
pub mod decode;
pub mod elf;
pub mod found;
pub mod ldprobes;
pub mod loader;
pub mod model;
pub mod output;
pub mod privilege;
pub mod recording;
pub mod session;
pub mod units;
