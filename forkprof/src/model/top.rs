//! The view model of `forkprof top`: rates from counter samples, and per-binary rows from the
//! processes that finished in the last interval. Pure: the TUI and the plain output render it.
use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use super::live::{Counters, Finished};
use super::phases::Phase;
use super::report::escape;
use super::trace::Shared;

/// Intervals kept for the 1-minute average (at the default 1 s interval).
const HISTORY: usize = 60;

#[derive(Clone, Debug, Default, Serialize)]
pub struct BinaryRow {
    pub binary: String,
    /// Processes of this binary finished per second, over the last interval.
    pub spawns_per_s: f64,
    pub mean_spawn_cost_ns: u64,
    /// Mean of each `Phase::SPAWN_COST_PARTS` phase (ns), in that order.
    pub cost_parts_ns: [u64; 8],
    /// The parent binary that spawned most of them.
    pub top_parent: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TopView {
    pub interval_s: f64,
    pub spawn_rate_now: f64,
    pub spawn_rate_1m: f64,
    pub spawn_rate_peak: f64,
    pub exec_rate: f64,
    pub failed_exec_rate: f64,
    pub thread_rate: f64,
    pub lost_events: u64,
    pub in_flight: usize,
    pub rows: Vec<BinaryRow>,
}

#[derive(Default)]
struct Acc {
    count: u64,
    cost: u64,
    parts: [u64; 8],
    parents: HashMap<Shared, u64>,
}

#[derive(Default)]
pub struct Top {
    prev: Option<Counters>,
    history: VecDeque<(f64, u64)>,
    peak: f64,
    current: HashMap<Shared, Acc>,
}

impl Top {
    /// Adds processes finished since the last tick.
    pub fn add(&mut self, finished: &[Finished]) {
        for f in finished {
            let acc = self.current.entry(f.binary.clone()).or_default();
            acc.count += 1;
            acc.cost += f.phases.get(Phase::SpawnCost).unwrap_or(0);
            for (slot, phase) in acc.parts.iter_mut().zip(Phase::SPAWN_COST_PARTS) {
                *slot += f.phases.get(phase).unwrap_or(0);
            }
            *acc.parents.entry(f.parent_binary.clone()).or_default() += 1;
        }
    }

    /// Closes an interval of `interval_s` seconds and returns what to show.
    pub fn tick(
        &mut self,
        counters: &Counters,
        lost_events: u64,
        in_flight: usize,
        interval_s: f64,
    ) -> TopView {
        let prev = self.prev.replace(counters.clone()).unwrap_or_default();
        let dt = interval_s.max(1e-9);
        let spawned = counters.spawns_total() - prev.spawns_total();
        let now = spawned as f64 / dt;
        self.history.push_back((dt, spawned));
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        let (t, n) = self
            .history
            .iter()
            .fold((0.0, 0u64), |(t, n), &(dt, c)| (t + dt, n + c));
        self.peak = self.peak.max(now);
        let mut rows: Vec<BinaryRow> = self
            .current
            .drain()
            .map(|(binary, acc)| BinaryRow {
                binary: escape(&binary),
                spawns_per_s: acc.count as f64 / dt,
                mean_spawn_cost_ns: acc.cost / acc.count.max(1),
                cost_parts_ns: acc.parts.map(|p| p / acc.count.max(1)),
                top_parent: acc
                    .parents
                    .into_iter()
                    .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                    .map(|(p, _)| escape(&p))
                    .unwrap_or_default(),
            })
            .collect();
        sort_rows(&mut rows, SortColumn::Spawns);
        TopView {
            interval_s: dt,
            spawn_rate_now: now,
            spawn_rate_1m: if t > 0.0 { n as f64 / t } else { 0.0 },
            spawn_rate_peak: self.peak,
            exec_rate: (counters.execs_ok - prev.execs_ok) as f64 / dt,
            failed_exec_rate: (counters.execs_failed - prev.execs_failed) as f64 / dt,
            thread_rate: (counters.threads - prev.threads) as f64 / dt,
            lost_events,
            in_flight,
            rows,
        }
    }
}

/// Columns the TUI can sort by (`s` cycles through them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortColumn {
    #[default]
    Spawns,
    MeanCost,
    TotalCost,
    Binary,
}

impl SortColumn {
    pub fn next(self) -> Self {
        match self {
            Self::Spawns => Self::MeanCost,
            Self::MeanCost => Self::TotalCost,
            Self::TotalCost => Self::Binary,
            Self::Binary => Self::Spawns,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Spawns => "spawns/s",
            Self::MeanCost => "mean cost",
            Self::TotalCost => "total cost",
            Self::Binary => "binary",
        }
    }
}

pub fn sort_rows(rows: &mut [BinaryRow], by: SortColumn) {
    let total = |r: &BinaryRow| r.spawns_per_s * r.mean_spawn_cost_ns as f64;
    rows.sort_by(|a, b| {
        match by {
            SortColumn::Spawns => b.spawns_per_s.total_cmp(&a.spawns_per_s),
            SortColumn::MeanCost => b.mean_spawn_cost_ns.cmp(&a.mean_spawn_cost_ns),
            SortColumn::TotalCost => total(b).total_cmp(&total(a)),
            SortColumn::Binary => a.binary.cmp(&b.binary),
        }
        .then_with(|| a.binary.cmp(&b.binary))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Method, Phases};

    fn finished(bin: &str, parent: &str, cost: u64) -> Finished {
        let mut phases = Phases::default();
        phases.0[Phase::SpawnCost as usize] = Some(cost);
        phases.0[Phase::Fork as usize] = Some(cost / 4);
        Finished {
            binary: bin.as_bytes().into(),
            parent_binary: parent.as_bytes().into(),
            method: Method::Fork,
            phases,
            ld_objects: None,
        }
    }

    #[test]
    fn rates_averages_and_rows() {
        let mut top = Top::default();
        let mut c = Counters::default();
        c.spawns[0] = 10;
        c.execs_ok = 10;
        let v = top.tick(&c, 0, 0, 1.0);
        assert_eq!(v.spawn_rate_now, 10.0);
        c.spawns[0] = 40;
        c.execs_failed = 4;
        top.add(&[
            finished("/bin/cc", "/bin/make", 1000),
            finished("/bin/cc", "/bin/sh", 3000),
            finished("/bin/cc", "/bin/make", 2000),
        ]);
        let v = top.tick(&c, 2, 5, 2.0);
        assert_eq!(v.spawn_rate_now, 15.0);
        assert_eq!(v.spawn_rate_peak, 15.0);
        assert!((v.spawn_rate_1m - 40.0 / 3.0).abs() < 1e-9);
        assert_eq!(v.failed_exec_rate, 2.0);
        assert_eq!((v.lost_events, v.in_flight), (2, 5));
        assert_eq!(v.rows.len(), 1);
        let r = &v.rows[0];
        assert_eq!((r.spawns_per_s, r.mean_spawn_cost_ns), (1.5, 2000));
        assert_eq!(r.cost_parts_ns[0], 500);
        assert_eq!(r.top_parent, "/bin/make");
        // The next interval starts empty.
        assert!(top.tick(&c, 2, 0, 1.0).rows.is_empty());
    }
}
