//! Any file handed to `forkprof report`: opening and loading it returns an error or a trace,
//! never a panic.
#![no_main]

use forkprof::model::{Report, report::Context};
use forkprof::recording::Recording;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("forkprof-fuzz-{}.db", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(rec) = Recording::open(&path)
        && let Ok(trace) = rec.load(true)
    {
        let _ = Report::build(&trace, &Context::for_run(&|_| false));
    }
    let _ = std::fs::remove_file(&path);
});
