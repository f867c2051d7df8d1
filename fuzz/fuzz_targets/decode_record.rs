//! Any bytes from the ring buffer: decoding never panics, and whatever decodes goes through
//! the model and a full report without panicking either.
#![no_main]

use forkprof::decode::decode;
use forkprof::model::{Report, Trace, report::Context};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut trace = Trace::default();
    // Several records per input, each as long as the first byte says.
    let mut rest = data;
    while !rest.is_empty() {
        let len = (rest[0] as usize * 8).min(rest.len() - 1);
        let (item, tail) = rest[1..].split_at(len);
        if let Ok(records) = decode(item) {
            records.into_iter().for_each(|r| trace.ingest(r));
        }
        rest = tail;
    }
    let report = Report::build(&trace, &Context::for_run(&|_| false));
    let _ = serde_json::to_string(&report);
});
