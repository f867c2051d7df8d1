//! The ring buffer's boundary: yields decoded records and a summary of what was lost.
use std::time::Duration;

use anyhow::{Context as _, Result};
use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use forkprof_common::{LdRecord, ProcKey, ProcState, kind, stat};
use tokio::io::{Interest, unix::AsyncFd};

use crate::decode::{Record, decode};
use crate::model::trace::LostCounts;

/// How promptly the agent collects records: how often it polls the ring buffer, and how many
/// unread bytes make the kernel wake it sooner (the eBPF crate's `WAKEUP_BYTES`; the ring
/// buffer holds 16 MiB). Only a process's exit record can wake it, and only the first to
/// find the ring past the threshold: an agent that has not drained since (stopped, or
/// starved of CPU) is not woken again until it has, so that each exit meanwhile does not pay
/// for an interrupt (docs/kernel-findings.md, "A stalled agent is woken once per fill").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    pub poll: Duration,
    pub wakeup_bytes: u64,
}

impl Pace {
    /// For whatever reads the records while tracing goes on: the live views, a recording (a
    /// SIGKILL loses what is still in the ring buffer) and `--precise-ld` (which attaches
    /// its uprobes to a new dynamic linker when it reads the exec that loaded it).
    pub const PROMPT: Pace = Pace {
        poll: Duration::from_millis(100),
        wakeup_bytes: 256 << 10,
    };
    /// For `run` without a recording or `--precise-ld`: nothing reads the records before the
    /// command ends, so the agent wakes a tenth as often. At 1,500 spawns a second the
    /// prompt pace woke it about 10 times a second; this one once, and its CPU per spawn
    /// fell by half (BENCHMARKS.md, "The agent collecting beside the loop"). 12 MiB of
    /// headroom past the wakeup is about 7,000 spawns.
    pub const LAZY: Pace = Pace {
        poll: Duration::from_secs(1),
        wakeup_bytes: 4 << 20,
    };
    /// For the live views (`top`, `monitor`): they take what is queued at the end of every
    /// update themselves (`LiveSession::run_until`: every 500 ms for `monitor`, every 50 ms
    /// in the TUI), so a poll in between would only wake the agent for nothing. An idle
    /// `monitor` woke about 20 times a second at the prompt pace, each wakeup 70-95 µs of
    /// CPU on the VM measured (BENCHMARKS.md, "An idle agent"). The kernel still wakes it
    /// once 256 KiB wait, as at the prompt pace, so a busy host is drained as promptly.
    pub const LIVE: Pace = Pace {
        poll: Duration::from_secs(1),
        wakeup_bytes: 256 << 10,
    };
}

impl Default for Pace {
    fn default() -> Self {
        Pace::PROMPT
    }
}

/// What was lost so far (cumulative): the kernel's `STATS` counters and the items the
/// collector could not decode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// `ringbuf_full`, `state_map_full` and `undecodable`; `recording_dropped` is the
    /// session's to fill in (the collector knows nothing of recordings).
    pub lost: LostCounts,
    /// `stat::EXIT_WITHOUT_NOTIFY`: exits the kernel closed without seeing the parent
    /// notified. It is counted before the exit record is sent, so it also holds the exits
    /// whose record then found the ring buffer full (see `TraceSession::drain`).
    pub exits_without_notify: u64,
}

pub struct Collector {
    ring: AsyncFd<RingBuf<MapData>>,
    stats: PerCpuArray<MapData, u64>,
    /// The kernel's process states (`PROC_SLOTS`, by `tgid & slot_mask`, and the spill map
    /// `PROCS_SPILL`), for the records they hold when a trace ends (`held_ld`).
    slots: Array<MapData, ProcState>,
    spill: HashMap<MapData, u32, ProcState>,
    slot_mask: u32,
    undecodable: u64,
    /// `Pace::poll`.
    poll: Duration,
}

impl Collector {
    /// `poll`: the `Pace` the programs were loaded with (`LoadOptions::pace`); `slot_mask`:
    /// their `PROC_SLOT_MASK` (`Loaded::proc_slot_mask`).
    pub fn new(ebpf: &mut aya::Ebpf, poll: Duration, slot_mask: u32) -> Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .with_context(|| format!("map {name} missing"))
        };
        let ring = RingBuf::try_from(take("EVENTS")?)?;
        let stats = PerCpuArray::try_from(take("STATS")?)?;
        let slots = Array::try_from(take("PROC_SLOTS")?)?;
        let spill = HashMap::try_from(take("PROCS_SPILL")?)?;
        Ok(Self {
            // SAFETY: the ring buffer owns its fd, which stays open and unchanged for as long
            // as the AsyncFd that owns the ring buffer.
            ring: unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)
                .context("polling the ring buffer")?,
            stats,
            slots,
            spill,
            slot_mask,
            undecodable: 0,
            poll,
        })
    }

    /// Waits until the kernel wakes the agent (the ring buffer is filling up) or its poll
    /// interval passes, then hands every queued record to `each`. The kernel only wakes the
    /// agent past a fill threshold, so that tracing does not schedule the agent on every
    /// record.
    pub async fn collect(&mut self, each: &mut impl FnMut(Record)) -> Result<()> {
        tokio::select! {
            guard = self.ring.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &mut self.undecodable, each);
                guard.clear_ready();
            }
            _ = tokio::time::sleep(self.poll) => {
                drain(self.ring.get_mut(), &mut self.undecodable, each);
            }
        }
        Ok(())
    }

    /// Hands whatever is in the ring buffer now to `each`, without waiting.
    pub fn drain(&mut self, each: &mut impl FnMut(Record)) {
        drain(self.ring.get_mut(), &mut self.undecodable, each);
    }

    /// The dynamic-linker records that processes `running` still hold: a process holds its
    /// window's record from the window's close to its exit, which sends both
    /// (`ExitRecords`), so the record of one still running when a trace ends is read here,
    /// from its entry. Only an entry of the same process (its `ProcKey`) counts. An entry
    /// that cannot be read holds nothing.
    pub fn held_ld(&self, running: impl IntoIterator<Item = ProcKey>) -> Vec<LdRecord> {
        running
            .into_iter()
            .filter_map(|key| {
                let state = self
                    .slots
                    .get(&(key.pid & self.slot_mask), 0)
                    .ok()
                    .filter(|s| s.owner == u64::from(key.pid))
                    .or_else(|| self.spill.get(&key.pid, 0).ok())?;
                let ld = state.sent_at_exit.ld;
                (state.key == key && ld.hdr.kind == kind::LD).then_some(ld)
            })
            .collect()
    }

    /// Every loss counter now: all of the kernel's `STATS`, and the undecodable items.
    pub fn losses(&self) -> Result<Losses> {
        let sum = |index: u32| -> Result<u64> {
            Ok(self
                .stats
                .get(&index, 0)
                .with_context(|| format!("reading loss counter {index}"))?
                .iter()
                .sum())
        };
        Ok(Losses {
            lost: LostCounts {
                ringbuf_full: sum(stat::RINGBUF_FULL)?,
                state_map_full: sum(stat::STATE_MAP_FULL)?,
                undecodable: self.undecodable,
                recording_dropped: 0,
                ia32_unseen: sum(stat::IA32_UNSEEN)?,
                exit_unseen: sum(stat::EXIT_UNSEEN)?,
            },
            exits_without_notify: sum(stat::EXIT_WITHOUT_NOTIFY)?,
        })
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

fn drain(ring: &mut RingBuf<MapData>, undecodable: &mut u64, each: &mut impl FnMut(Record)) {
    static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    while let Some(item) = ring.next() {
        if let Some(n) = panic_after()
            && SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= n
        {
            panic!("FORKPROF_TEST_PANIC_AFTER={n} reached");
        }
        let decoded = decode(&item);
        // Consumed before the record is routed: its slot is free for the kernel again.
        drop(item);
        match decoded {
            Ok(records) => records.into_iter().for_each(&mut *each),
            Err(_) => *undecodable += 1,
        }
    }
}
