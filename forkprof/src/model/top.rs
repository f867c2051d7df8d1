//! The view model of `forkprof top`: rates from counter samples, and rows per binary, per
//! cgroup and per unit from the processes that finished in the last interval (and, idle,
//! those of the last `HISTORY` intervals). Pure: the TUI and the plain output render it.
use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use super::cgroup::unit_of;
use super::live::{Counters, Finished};
use super::phases::Phase;
use super::report::escape;
use super::trace::Shared;

/// Intervals kept for the 1-minute average (at the default 1 s interval).
const HISTORY: usize = 60;

/// Groups whose total since start `top` keeps, per grouping, before it forgets those idle
/// for `HISTORY` intervals; and idle rows it keeps showing, before it shows only the
/// interval's.
const TOTALS_CAP: usize = 10_000;

/// What a row of `top` is (`g` cycles through them; `--by` picks the first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupMode {
    /// The binary a process ran last.
    #[default]
    Binary,
    /// Its cgroup v2 path (where it exec'd last, else where it was created).
    Cgroup,
    /// The systemd unit or container of that cgroup.
    Unit,
}

impl GroupMode {
    pub const ALL: [Self; 3] = [Self::Binary, Self::Cgroup, Self::Unit];

    pub fn next(self) -> Self {
        match self {
            Self::Binary => Self::Cgroup,
            Self::Cgroup => Self::Unit,
            Self::Unit => Self::Binary,
        }
    }

    /// The name in the header, the help and the plain lines (`cgroup=/system.slice/...`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Binary => "binary",
            Self::Cgroup => "cgroup",
            Self::Unit => "unit",
        }
    }

    /// What `Row::top` is: the main parent binary of a binary's processes, the main binary
    /// of a cgroup's or unit's.
    pub fn top_name(self) -> &'static str {
        match self {
            Self::Binary => "top_parent",
            Self::Cgroup | Self::Unit => "top_binary",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Row {
    /// The binary, cgroup or unit; a cgroup (or a unit whose cgroups all are) removed since
    /// is its last known path with ` (gone)`.
    pub name: String,
    /// Processes of this group finished in the last interval. 0: an idle row, shown for
    /// `HISTORY` intervals after its last active one, whose mean cost, phases and top are
    /// that interval's.
    pub processes: u64,
    /// ... and since `top` started.
    pub total: u64,
    /// Processes of this group finished per second, over the last interval.
    pub spawns_per_s: f64,
    pub mean_spawn_cost_ns: u64,
    /// Mean of each `Phase::SPAWN_COST_PARTS` phase (ns), in that order.
    pub cost_parts_ns: [u64; 8],
    /// See `GroupMode::top_name`.
    pub top: String,
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
    /// The rows of each grouping, in `GroupMode` order: switching is immediate.
    pub rows: [Vec<Row>; 3],
}

impl TopView {
    pub fn rows(&self, by: GroupMode) -> &[Row] {
        &self.rows[by.index()]
    }
}

#[derive(Default)]
struct Acc {
    count: u64,
    cost: u64,
    parts: [u64; 8],
    tops: HashMap<Shared, u64>,
    /// The cgroups of the processes, when grouped by cgroup or unit (to tell a gone one).
    cgroups: Vec<(u64, Shared)>,
}

#[derive(Default)]
pub struct Top {
    prev: Option<Counters>,
    history: VecDeque<(f64, u64)>,
    peak: f64,
    current: [HashMap<Shared, Acc>; 3],
    /// Per grouping: each group's row of the last interval it was active in (its `total`,
    /// the processes finished since start), and that tick: the idle rows come from here.
    totals: [HashMap<Shared, (Row, u64)>; 3],
    ticks: u64,
    /// Cgroup path -> unit.
    units: HashMap<Shared, Shared>,
}

/// Whether a cgroup label is a path (it was named), not `?` or `cgroup ID`.
fn is_path(label: &[u8]) -> bool {
    label.first() == Some(&b'/')
}

impl Top {
    /// Adds processes finished since the last tick.
    pub fn add(&mut self, finished: &[Finished]) {
        for f in finished {
            for by in GroupMode::ALL {
                let (key, top) = match by {
                    GroupMode::Binary => (f.binary.clone(), &f.parent_binary),
                    GroupMode::Cgroup => (f.cgroup.clone(), &f.binary),
                    GroupMode::Unit => {
                        if self.units.len() > TOTALS_CAP {
                            self.units.clear();
                        }
                        let unit = self
                            .units
                            .entry(f.cgroup.clone())
                            .or_insert_with(|| {
                                unit_of(&String::from_utf8_lossy(&f.cgroup))
                                    .as_bytes()
                                    .into()
                            })
                            .clone();
                        (unit, &f.binary)
                    }
                };
                let acc = self.current[by.index()].entry(key).or_default();
                acc.count += 1;
                acc.cost += f.phases.get(Phase::SpawnCost).unwrap_or(0);
                for (slot, phase) in acc.parts.iter_mut().zip(Phase::SPAWN_COST_PARTS) {
                    *slot += f.phases.get(phase).unwrap_or(0);
                }
                *acc.tops.entry(top.clone()).or_default() += 1;
                if by != GroupMode::Binary
                    && is_path(&f.cgroup)
                    && !acc.cgroups.iter().any(|(id, _)| *id == f.cgroup_id)
                {
                    acc.cgroups.push((f.cgroup_id, f.cgroup.clone()));
                }
            }
        }
    }

    /// Closes an interval of `interval_s` seconds and returns what to show. `gone(id, path)`
    /// tells a cgroup removed since it was named.
    pub fn tick(
        &mut self,
        counters: &Counters,
        lost_events: u64,
        in_flight: usize,
        interval_s: f64,
        gone: &dyn Fn(u64, &[u8]) -> bool,
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
        self.ticks += 1;
        let ticks = self.ticks;
        let mut rows: [Vec<Row>; 3] = Default::default();
        for by in GroupMode::ALL {
            let totals = &mut self.totals[by.index()];
            let out = &mut rows[by.index()];
            for (key, acc) in self.current[by.index()].drain() {
                // Named cgroups, every one of them removed since.
                let is_gone =
                    !acc.cgroups.is_empty() && acc.cgroups.iter().all(|(id, path)| gone(*id, path));
                let mut name = escape(&key);
                if is_gone {
                    name.push_str(" (gone)");
                }
                let last = totals.entry(key).or_default();
                let row = Row {
                    name,
                    processes: acc.count,
                    total: last.0.total + acc.count,
                    spawns_per_s: acc.count as f64 / dt,
                    mean_spawn_cost_ns: acc.cost / acc.count.max(1),
                    cost_parts_ns: acc.parts.map(|p| p / acc.count.max(1)),
                    top: acc
                        .tops
                        .into_iter()
                        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                        .map(|(p, _)| escape(&p))
                        .unwrap_or_default(),
                };
                *last = (row.clone(), ticks);
                out.push(row);
            }
            let recent = |seen: u64| seen + HISTORY as u64 > ticks;
            if totals.len() > TOTALS_CAP {
                totals.retain(|_, (_, seen)| recent(*seen));
            }
            // The groups idle this interval but active in one of the last `HISTORY`: shown
            // with no spawns, so that a burst's rows stay on the screen for a minute, as the
            // header's 1-minute average does; none past `TOTALS_CAP` rows in all.
            let idle: Vec<Row> = totals
                .values()
                .filter(|(_, seen)| *seen != ticks && recent(*seen))
                .map(|(row, _)| Row {
                    processes: 0,
                    spawns_per_s: 0.0,
                    ..row.clone()
                })
                .collect();
            if out.len() + idle.len() <= TOTALS_CAP {
                out.extend(idle);
            }
            sort_rows(out, SortColumn::Spawns);
        }
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
    /// The row's name (binary, cgroup or unit).
    Name,
}

impl SortColumn {
    pub fn next(self) -> Self {
        match self {
            Self::Spawns => Self::MeanCost,
            Self::MeanCost => Self::TotalCost,
            Self::TotalCost => Self::Name,
            Self::Name => Self::Spawns,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Spawns => "spawns/s",
            Self::MeanCost => "mean cost",
            Self::TotalCost => "total cost",
            Self::Name => "name",
        }
    }
}

pub fn sort_rows(rows: &mut [Row], by: SortColumn) {
    let total = |r: &Row| r.spawns_per_s * r.mean_spawn_cost_ns as f64;
    rows.sort_by(|a, b| {
        match by {
            SortColumn::Spawns => b.spawns_per_s.total_cmp(&a.spawns_per_s),
            SortColumn::MeanCost => b.mean_spawn_cost_ns.cmp(&a.mean_spawn_cost_ns),
            SortColumn::TotalCost => total(b).total_cmp(&total(a)),
            SortColumn::Name => a.name.cmp(&b.name),
        }
        .then_with(|| a.name.cmp(&b.name))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Method, Phases};

    fn finished(bin: &str, parent: &str, cost: u64) -> Finished {
        in_cgroup(bin, parent, cost, 0, "?")
    }

    fn in_cgroup(bin: &str, parent: &str, cost: u64, id: u64, cgroup: &str) -> Finished {
        let mut phases = Phases::default();
        phases.0[Phase::SpawnCost as usize] = Some(cost);
        phases.0[Phase::Fork as usize] = Some(cost / 4);
        Finished {
            binary: bin.as_bytes().into(),
            parent_binary: parent.as_bytes().into(),
            method: Method::Fork,
            phases,
            cgroup_id: id,
            cgroup: cgroup.as_bytes().into(),
        }
    }

    const NONE_GONE: &dyn Fn(u64, &[u8]) -> bool = &|_, _| false;

    #[test]
    fn rates_averages_and_rows() {
        let mut top = Top::default();
        let mut c = Counters::default();
        c.spawns[0] = 10;
        c.execs_ok = 10;
        let v = top.tick(&c, 0, 0, 1.0, NONE_GONE);
        assert_eq!(v.spawn_rate_now, 10.0);
        c.spawns[0] = 40;
        c.execs_failed = 4;
        top.add(&[
            finished("/bin/cc", "/bin/make", 1000),
            finished("/bin/cc", "/bin/sh", 3000),
            finished("/bin/cc", "/bin/make", 2000),
        ]);
        let v = top.tick(&c, 2, 5, 2.0, NONE_GONE);
        assert_eq!(v.spawn_rate_now, 15.0);
        assert_eq!(v.spawn_rate_peak, 15.0);
        assert!((v.spawn_rate_1m - 40.0 / 3.0).abs() < 1e-9);
        assert_eq!(v.failed_exec_rate, 2.0);
        assert_eq!((v.lost_events, v.in_flight), (2, 5));
        let rows = v.rows(GroupMode::Binary);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.spawns_per_s, r.mean_spawn_cost_ns), (1.5, 2000));
        assert_eq!((r.processes, r.total), (3, 3));
        assert_eq!(r.cost_parts_ns[0], 500);
        assert_eq!(r.top, "/bin/make");
        // The next interval has no spawns: the row stays, idle, with its last interval's
        // cost and top; the total since start stays.
        let v = top.tick(&c, 2, 0, 1.0, NONE_GONE);
        for by in GroupMode::ALL {
            let idle = &v.rows(by)[0];
            assert_eq!((idle.processes, idle.spawns_per_s), (0, 0.0), "{by:?}");
            assert_eq!((idle.total, idle.mean_spawn_cost_ns), (3, 2000), "{by:?}");
        }
        top.add(&[finished("/bin/cc", "/bin/make", 1000)]);
        let v = top.tick(&c, 2, 0, 1.0, NONE_GONE);
        let r = &v.rows(GroupMode::Binary)[0];
        assert_eq!((r.processes, r.total), (1, 4));
    }

    /// A group idle since its last spawn stays a row for `HISTORY` intervals, below the active
    /// ones when sorted by spawns, and then goes.
    #[test]
    fn an_idle_group_stays_a_row_for_a_minute() {
        let mut top = Top::default();
        let c = Counters::default();
        top.add(&[finished("/bin/burst", "/bin/sh", 5000)]);
        top.tick(&c, 0, 0, 1.0, NONE_GONE);
        for i in 1..HISTORY {
            top.add(&[finished("/bin/steady", "/bin/sh", 100)]);
            let v = top.tick(&c, 0, 0, 1.0, NONE_GONE);
            let names: Vec<(&str, u64)> = v
                .rows(GroupMode::Binary)
                .iter()
                .map(|r| (r.name.as_str(), r.processes))
                .collect();
            assert_eq!(
                names,
                [("/bin/steady", 1), ("/bin/burst", 0)],
                "interval {i}"
            );
        }
        let v = top.tick(&c, 0, 0, 1.0, NONE_GONE);
        let names: Vec<&str> = v
            .rows(GroupMode::Binary)
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["/bin/steady"], "a minute later");
    }

    /// The same processes give rows per binary, per cgroup and per unit; a cgroup removed
    /// since is shown by its last path with ` (gone)`, a unit only when all its cgroups are;
    /// an id never named is `cgroup ID`, never another group's path.
    #[test]
    fn rows_by_cgroup_and_unit_and_gone_groups() {
        let a = "/system.slice/a.service";
        let a_job = "/system.slice/a.service/job-1";
        let b = "/system.slice/b.service";
        let mut top = Top::default();
        top.add(&[
            in_cgroup("/bin/true", "/bin/sh", 100, 10, a),
            in_cgroup("/bin/true", "/bin/sh", 100, 10, a),
            in_cgroup("/bin/ls", "/bin/sh", 100, 11, a_job),
            in_cgroup("/bin/true", "/bin/sh", 100, 12, b),
            in_cgroup("/bin/cat", "/bin/sh", 100, 13, "cgroup 13"),
            in_cgroup("/bin/cat", "/bin/sh", 100, 0, "?"),
        ]);
        // b.service and a's job-1 were removed.
        let gone = |id: u64, _: &[u8]| id == 12 || id == 11;
        let v = top.tick(&Counters::default(), 0, 0, 1.0, &gone);
        let rows = |by| -> Vec<(String, u64, String)> {
            let mut r: Vec<_> = v
                .rows(by)
                .iter()
                .map(|r| (r.name.clone(), r.processes, r.top.clone()))
                .collect();
            r.sort();
            r
        };
        let s = |x: &str| x.to_string();
        assert_eq!(
            rows(GroupMode::Cgroup),
            vec![
                (s("/system.slice/a.service"), 2, s("/bin/true")),
                (s("/system.slice/a.service/job-1 (gone)"), 1, s("/bin/ls")),
                (s("/system.slice/b.service (gone)"), 1, s("/bin/true")),
                (s("?"), 1, s("/bin/cat")),
                (s("cgroup 13"), 1, s("/bin/cat")),
            ]
        );
        assert_eq!(
            rows(GroupMode::Unit),
            vec![
                (s("?"), 1, s("/bin/cat")),
                // One of its two cgroups is still there.
                (s("a.service"), 3, s("/bin/true")),
                (s("b.service (gone)"), 1, s("/bin/true")),
                (s("cgroup 13"), 1, s("/bin/cat")),
            ]
        );
        assert_eq!(
            rows(GroupMode::Binary),
            vec![
                (s("/bin/cat"), 2, s("/bin/sh")),
                (s("/bin/ls"), 1, s("/bin/sh")),
                (s("/bin/true"), 3, s("/bin/sh")),
            ]
        );
        assert_eq!(GroupMode::Binary.next().next().next(), GroupMode::Binary);
        assert_eq!(GroupMode::Binary.next().name(), "cgroup");
    }
}
