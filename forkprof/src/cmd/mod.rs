pub mod bench;
pub mod doctor;
pub mod monitor;
pub mod record;
pub mod report;
pub mod run;
pub mod top;
