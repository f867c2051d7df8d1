//! Processes assembled from a stream of records and handed on one at a time, once complete,
//! so that a report of any length needs memory for the processes alive at once, not for
//! every process.
//!
//! Records come roughly in time order (a recording's tables are read merged by timestamp).
//! A process is complete when its exit record is `GRACE_NS` behind the newest record read,
//! and every child it created is complete. The grace covers what can arrive after an exit:
//! the spawn record, which the parent writes when its fork returns (after a vfork child's
//! exit, or a fork child's that ran first), and the few microseconds by which the kernel's
//! ring buffer can reorder records across CPUs. Waiting for the children keeps a parent's
//! history (its execs, its origin) until the last child that needs it is labelled, so each
//! process is labelled exactly as `Trace::origins` labels it with the whole trace in memory.
//! Processes still running when the stream ends are handed on last, children first.
use std::collections::VecDeque;

use forkprof_common::ProcKey;
use rustc_hash::{FxHashMap, FxHashSet};

use super::method::Spawned;
use super::trace::{Binaries, Names, Origin};
use super::{Method, Process, Trace};
use crate::decode::Record;

/// How far behind the newest record an exit must be before its process is handed on.
pub const GRACE_NS: u64 = 2_000_000_000;

/// Receives each complete process with its binaries and origin; `trace` holds what is known
/// beyond it (cgroup names, mounts, the processes still alive).
pub type Sink<'s> = dyn FnMut(&Trace, &Process, &Binaries, &Origin) -> anyhow::Result<()> + 's;

pub struct Assembler {
    /// The processes not yet handed on, and what is known beyond them.
    pub trace: Trace,
    names: Names,
    /// Origins worked out already (for a parent, when its first child was labelled).
    origins: FxHashMap<ProcKey, Origin>,
    /// Children not yet handed on, per parent.
    open_children: FxHashMap<ProcKey, u32>,
    /// Exit records read, in order: (timestamp, process).
    exited: VecDeque<(u64, ProcKey)>,
    /// Exited past the grace, waiting for their children.
    waiting: FxHashSet<ProcKey>,
    /// The newest timestamp read.
    now: u64,
}

impl Assembler {
    /// `trace` carries what the stream does not: labels of processes found running, cgroup
    /// names, mounts, the root.
    pub fn new(trace: Trace) -> Self {
        Self {
            trace,
            names: Names::default(),
            origins: FxHashMap::default(),
            open_children: FxHashMap::default(),
            exited: VecDeque::new(),
            waiting: FxHashSet::default(),
            now: 0,
        }
    }

    pub fn ingest(&mut self, record: Record, sink: &mut Sink<'_>) -> anyhow::Result<()> {
        let (ts, exit_of) = match &record {
            Record::Spawn(r) => {
                // A child counts as its parent's open child from its spawn record on.
                if let Spawned::Process(_) = Method::spawned(r) {
                    *self.open_children.entry(r.parent).or_default() += 1;
                }
                (r.hdr.ts_ns, None)
            }
            Record::Exec(r) => (r.hdr.ts_ns, None),
            Record::Ld(r) => (r.hdr.ts_ns, None),
            Record::Exit(r) => (r.hdr.ts_ns, Some(r.hdr.proc)),
        };
        self.trace.ingest(record);
        if let Some(key) = exit_of {
            self.exited.push_back((ts, key));
        }
        self.now = self.now.max(ts);
        while let Some(&(t, key)) = self.exited.front() {
            if t.saturating_add(GRACE_NS) > self.now {
                break;
            }
            self.exited.pop_front();
            self.complete(key, sink)?;
        }
        Ok(())
    }

    /// Hands on `key` if it is complete (no open children), then each parent that was
    /// waiting for it alone.
    fn complete(&mut self, key: ProcKey, sink: &mut Sink<'_>) -> anyhow::Result<()> {
        let mut next = Some(key);
        while let Some(key) = next.take() {
            if self.open_children.get(&key).is_some_and(|&n| n > 0) {
                self.waiting.insert(key);
                return Ok(());
            }
            self.waiting.remove(&key);
            let Some(parent) = self.hand_on(key, sink)? else {
                continue;
            };
            let Some(n) = self.open_children.get_mut(&parent) else {
                continue;
            };
            *n -= 1;
            if *n == 0 {
                self.open_children.remove(&parent);
                if self.waiting.contains(&parent) {
                    next = Some(parent);
                }
            }
        }
        Ok(())
    }

    /// The origin of `key`, working out its ancestors' first where needed.
    fn origin(&mut self, key: ProcKey) -> Option<Origin> {
        if let Some(o) = self.origins.get(&key) {
            return Some(o.clone());
        }
        // The chain of ancestors without an origin yet, nearest first.
        let mut chain = vec![key];
        loop {
            let last = *chain.last().expect("not empty");
            let parent = self.trace.get(&last)?.parent;
            match parent {
                // A parent already in the chain would be a cycle, which no real lineage
                // has; a corrupt recording must not make this loop forever.
                Some(k)
                    if self.trace.contains(&k)
                        && !self.origins.contains_key(&k)
                        && !chain.contains(&k) =>
                {
                    chain.push(k)
                }
                _ => break,
            }
        }
        for k in chain.into_iter().rev() {
            let p = self.trace.get(&k).expect("in the chain");
            let parent = p
                .parent
                .and_then(|pk| Some((self.trace.get(&pk)?, self.origins.get(&pk)?)));
            let o = self.trace.origin(p, parent, &mut self.names);
            self.origins.insert(k, o);
        }
        self.origins.get(&key).cloned()
    }

    /// Hands on one process; returns its parent when it counted as one of the parent's
    /// open children.
    fn hand_on(&mut self, key: ProcKey, sink: &mut Sink<'_>) -> anyhow::Result<Option<ProcKey>> {
        let Some(origin) = self.origin(key) else {
            return Ok(None);
        };
        let p = self.trace.remove(&key).expect("origin found it");
        self.origins.remove(&key);
        let binaries = Binaries {
            at_spawn: origin.at_spawn.clone(),
            last: self.trace.last_binary(&p, &origin, &mut self.names),
        };
        sink(&self.trace, &p, &binaries, &origin)?;
        // Only a process spawn record sets `spawn` (and `parent`).
        Ok(p.spawn.and(p.parent))
    }

    /// Hands on every process left (those still running when the stream ended, and those
    /// within the grace), children before parents; returns the trace, which keeps the
    /// stream's counts (threads, lost records, first and last timestamps).
    pub fn finish(mut self, sink: &mut Sink<'_>) -> anyhow::Result<Trace> {
        let order = self.trace.by_start();
        let keys: Vec<ProcKey> = order.iter().map(|&i| self.trace.processes[i].key).collect();
        // Origins first, parents before children, while every parent is still here.
        for &k in &keys {
            self.origin(k);
        }
        for k in keys.into_iter().rev() {
            if let Some(parent) = self.hand_on(k, sink)?
                && let Some(n) = self.open_children.get_mut(&parent)
            {
                *n = n.saturating_sub(1);
            }
        }
        Ok(self.trace)
    }
}
