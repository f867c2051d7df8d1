//! Ring buffer -> decoded records -> the trace, plus the kernel's loss counters.
use anyhow::{Context as _, Result};
use aya::maps::{MapData, PerCpuArray, RingBuf};
use forkprof_common::stat;
use tokio::io::{Interest, unix::AsyncFd};

use crate::model::{Trace, live::Live};
use crate::recording::Writer;
use crate::records::decode;

/// Where decoded records go: the recording when there is one, and then the live aggregator
/// (top, monitor) or else the in-memory trace (run, record).
pub struct Sink<'a> {
    pub trace: &'a mut Trace,
    pub live: Option<&'a mut Live>,
    pub writer: Option<&'a Writer>,
}

/// How often the agent collects records when the kernel has not woken it.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(100);

pub struct Collector {
    ring: AsyncFd<RingBuf<MapData>>,
    stats: PerCpuArray<MapData, u64>,
}

impl Collector {
    pub fn new(ebpf: &mut aya::Ebpf) -> Result<Self> {
        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").context("map EVENTS missing")?)?;
        let stats = PerCpuArray::try_from(ebpf.take_map("STATS").context("map STATS missing")?)?;
        Ok(Self {
            // SAFETY: the ring buffer owns its fd, which stays open and unchanged for as long
            // as the AsyncFd that owns the ring buffer.
            ring: unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)
                .context("polling the ring buffer")?,
            stats,
        })
    }

    /// Waits until the kernel wakes the agent (the ring buffer is filling up) or `POLL`
    /// passes, then folds every queued record into `trace`. The kernel only wakes the agent
    /// past a fill threshold, so that tracing does not schedule the agent on every record.
    pub async fn collect(&mut self, sink: &mut Sink<'_>) -> Result<()> {
        tokio::select! {
            guard = self.ring.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), sink);
                guard.clear_ready();
            }
            _ = tokio::time::sleep(POLL) => drain(self.ring.get_mut(), sink),
        }
        Ok(())
    }

    /// Reads whatever is in the ring buffer now, without waiting.
    pub fn drain(&mut self, sink: &mut Sink<'_>) {
        drain(self.ring.get_mut(), sink);
    }

    /// Copies the kernel's loss counters into `trace` (they are cumulative).
    pub fn read_losses(&self, trace: &mut Trace) -> Result<()> {
        let sum = |index: u32| -> Result<u64> { Ok(self.stats.get(&index, 0)?.iter().sum()) };
        trace.lost.ringbuf_full = sum(stat::RINGBUF_FULL)?;
        trace.lost.state_map_full = sum(stat::STATE_MAP_FULL)?;
        Ok(())
    }
}

/// Test hook: `FORKPROF_TEST_PANIC_AFTER=N` makes the agent panic after N records, so that
/// the tests can check what a bug in the agent leaves behind.
fn panic_after() -> Option<u64> {
    static AFTER: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *AFTER.get_or_init(|| {
        std::env::var("FORKPROF_TEST_PANIC_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

fn drain(ring: &mut RingBuf<MapData>, sink: &mut Sink<'_>) {
    static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    while let Some(item) = ring.next() {
        if let Some(n) = panic_after()
            && SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= n
        {
            panic!("FORKPROF_TEST_PANIC_AFTER={n} reached");
        }
        match decode(&item) {
            Ok(record) => {
                if let Some(w) = sink.writer {
                    w.record(&record);
                }
                match sink.live.as_deref_mut() {
                    Some(live) => live.ingest(record),
                    None => sink.trace.ingest(record),
                }
            }
            Err(_) => sink.trace.lost.undecodable += 1,
        }
    }
}
