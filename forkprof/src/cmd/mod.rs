pub mod doctor;
pub mod record;
pub mod report;
pub mod run;
