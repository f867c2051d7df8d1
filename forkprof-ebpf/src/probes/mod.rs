//! The kernel programs' bodies, one module per subsystem: syscalls, fork, exec, the dynamic
//! linker, the address space (mm), atime, and exit.
pub mod atime;
pub mod dynlink;
pub mod exec;
pub mod exit;
pub mod fork;
pub mod mm;
pub mod path;
pub mod syscalls;
