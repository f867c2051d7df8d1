//! One module per subcommand: parse nothing, drive a session or a recording, print.
pub mod bench;
pub mod doctor;
pub mod monitor;
pub mod record;
pub mod report;
pub mod run;
pub mod top;
