//! One module per subcommand: parse nothing, drive a session or a recording, print.
pub mod bench;
pub mod diff;
pub mod docs;
pub mod doctor;
pub mod export;
pub mod monitor;
pub mod record;
pub mod report;
pub mod run;
pub mod top;

use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::model::Trace;
use crate::recording::{Recording, RecordingError};

/// Exit code for a file that is not a readable recording (bad input).
pub const EXIT_BAD_RECORDING: i32 = 2;

/// Opens a recording to stream (`report`, `export`): it and the trace its records start
/// from, or, said on stderr, the exit code for a file that is not a readable recording.
pub fn open_recording(path: &Path, keep_args: bool) -> Result<(Recording, Trace), i32> {
    let said = |e: &RecordingError| {
        eprintln!("forkprof: {e}");
        EXIT_BAD_RECORDING
    };
    let recording = Recording::open(path).map_err(|e| said(&e))?;
    let start = recording.stream_start(keep_args).map_err(|e| said(&e))?;
    Ok((recording, start))
}

/// A recording found corrupt part way through is bad input: said on stderr, exit 2. Any
/// other error stays one.
pub fn bad_recording_or(e: anyhow::Error) -> anyhow::Result<i32> {
    match e.downcast_ref::<RecordingError>() {
        Some(bad) => {
            eprintln!("forkprof: {bad}");
            Ok(EXIT_BAD_RECORDING)
        }
        None => Err(e),
    }
}

/// The exit code when the output turns out to be a closed pipe (`forkprof report | head`):
/// that is a normal end, so 0, or the traced command's status once `run` knows it.
static BROKEN_PIPE_EXIT: AtomicI32 = AtomicI32::new(0);

/// From now on, a closed output pipe ends forkprof with `code`.
pub fn exit_code_on_broken_pipe(code: i32) {
    BROKEN_PIPE_EXIT.store(code, Ordering::SeqCst);
}

pub fn broken_pipe_exit_code() -> i32 {
    BROKEN_PIPE_EXIT.load(Ordering::SeqCst)
}

/// Whether an error comes from writing to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(BrokenPipe))
            || c.downcast_ref::<csv::Error>().is_some_and(
                |e| matches!(e.kind(), csv::ErrorKind::Io(io) if io.kind() == BrokenPipe),
            )
    })
}

/// Removes `path`, an output left half-written (a full disk, a signal), if it is a regular
/// file: a device named as the output stays.
pub fn remove_partial(path: &Path) {
    if std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Removes `path`, an output being written, if forkprof is stopped by SIGINT, SIGTERM or
/// SIGHUP before it is whole (no error path runs then), and exits 128 + the signal's number,
/// as a shell would. A half-written file would otherwise look like a result, and the next
/// attempt would need `--force` (`remove_partial`). Call it once the file is created.
pub fn remove_on_signal(path: &Path) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            remove_partial(&path);
            eprintln!(
                "\nforkprof: stopped by signal {signal}; {} removed, incomplete",
                path.display()
            );
            std::process::exit(128 + signal);
        }
    });
    Ok(())
}
