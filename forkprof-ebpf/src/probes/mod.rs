pub mod atime;
pub mod dynlink;
pub mod exec;
pub mod exit;
pub mod fork;
pub mod mm;
pub mod syscalls;
