//! The Prometheus metrics of `forkprof monitor`, kept with the prometheus-client crate.
//! Counters move by the deltas of the live counters; each finished process is observed in
//! the phase histograms; per-binary and per-cgroup series are each bounded to their top K
//! groups by total spawn cost, the rest summed under `binary="other"` / `cgroup="other"`
//! (see `Bounded`).
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::Gauge,
        histogram::Histogram,
        info::Info,
    },
    registry::Registry,
};

use crate::model::{
    cgroup::unit_of,
    live::{Counters, Finished, METHODS},
    phases::{PHASES, Phase},
    report::escape,
    trace::Shared,
};

type Labels = Vec<(&'static str, String)>;

/// Buckets of the phase histograms, in seconds: 1 µs to ~1 s.
fn phase_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(1e-6, 2.0, 21)
}

/// One group's totals (a binary, or a cgroup).
#[derive(Clone, Debug, Default)]
struct Group {
    /// Processes and spawn cost (ns) since first seen: what ranks it.
    seen: (u64, u64),
    /// What its own series shows: the processes counted while it had one (`Some` once it
    /// has had one).
    shown: Option<(u64, u64)>,
    /// Whether it has its own series now (it is one of the top K).
    exported: bool,
}

/// Cumulative per-group totals, exported for the top K groups by spawn cost (since first
/// seen), the rest summed under `other`. A process counts where its group is at that
/// moment: its own series if it has one, else `other`, and stays there. So every series,
/// `other` included, only grows, and together they count every process observed:
/// - a group that leaves the top K keeps its count (its series pauses), and continues from
///   it if it comes back;
/// - a group that enters the top K starts its series then (what it did before is in
///   `other`); while fewer than K groups have a series, a new group gets one at once, so
///   on a host with at most K groups every series counts from the first process.
///
/// Memory is bounded: past `50 K + 100` groups, the cheapest that never had a series are
/// forgotten (their processes are in `other` already).
#[derive(Debug, Default)]
struct Bounded {
    groups: HashMap<Shared, Group>,
    other: (u64, u64),
    exported: usize,
    top: usize,
}

impl Bounded {
    fn new(top: usize) -> Self {
        Self {
            top,
            ..Default::default()
        }
    }

    fn cap(&self) -> usize {
        self.top * 50 + 100
    }

    fn add(&mut self, key: &Shared, cost_ns: u64) {
        let free = self.exported < self.top;
        let g = self.groups.entry(key.clone()).or_default();
        g.seen.0 += 1;
        g.seen.1 += cost_ns;
        if !g.exported && free {
            g.exported = true;
            self.exported += 1;
        }
        let slot = if g.exported {
            g.shown.get_or_insert_default()
        } else {
            &mut self.other
        };
        slot.0 += 1;
        slot.1 += cost_ns;
        if self.groups.len() > self.cap() {
            self.forget(self.cap() / 2);
        }
    }

    /// Gives the top K groups by spawn cost their own series, and takes it from the others
    /// (after each batch of processes).
    fn rank(&mut self) {
        let mut all: Vec<(&Shared, u64)> = self.groups.iter().map(|(k, g)| (k, g.seen.1)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let top: std::collections::HashSet<Shared> = all
            .iter()
            .take(self.top)
            .map(|(k, _)| (*k).clone())
            .collect();
        for (k, g) in self.groups.iter_mut() {
            g.exported = top.contains(k);
        }
        self.exported = top.len();
    }

    /// Forgets the cheapest groups that never had a series, down to `keep` groups if it can:
    /// a group that had one keeps its count, which must never restart.
    fn forget(&mut self, keep: usize) {
        let mut never: Vec<(Shared, u64)> = self
            .groups
            .iter()
            .filter(|(_, g)| g.shown.is_none() && !g.exported)
            .map(|(k, g)| (k.clone(), g.seen.1))
            .collect();
        never.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        let excess = self.groups.len().saturating_sub(keep);
        for (k, _) in never.into_iter().take(excess) {
            self.groups.remove(&k);
        }
    }

    /// The series: the groups that have one now, by cost, then `other`:
    /// (label, processes, cost_ns).
    fn series(&self) -> Vec<(String, u64, u64)> {
        let mut own: Vec<(&Shared, &Group)> =
            self.groups.iter().filter(|(_, g)| g.exported).collect();
        own.sort_by(|a, b| b.1.seen.1.cmp(&a.1.seen.1).then(a.0.cmp(b.0)));
        let mut out: Vec<(String, u64, u64)> = own
            .iter()
            .map(|(k, g)| {
                let (n, c) = g.shown.unwrap_or_default();
                (escape(k), n, c)
            })
            .collect();
        out.push((OTHER.into(), self.other.0, self.other.1));
        out
    }
}

/// The label value of the groups outside the top K.
const OTHER: &str = "other";

/// One bounded family pair: `forkprof_<noun>_spawns` and `forkprof_<noun>_spawn_cost_seconds`.
#[derive(Debug)]
struct GroupCollector {
    groups: Arc<Mutex<Bounded>>,
    /// `binary` or `cgroup`: the noun of the metric names and the label.
    label: &'static str,
    /// The flag that sets K.
    flag: &'static str,
}

impl GroupCollector {
    /// The labels of a series: the group's, and for a cgroup its unit.
    fn labels<'a>(&self, value: &'a str) -> Vec<(&'static str, std::borrow::Cow<'a, str>)> {
        let mut labels = vec![(self.label, std::borrow::Cow::Borrowed(value))];
        if self.label == "cgroup" {
            let unit = if value == OTHER || value == "?" {
                value.to_string()
            } else {
                unit_of(value)
            };
            labels.push(("unit", unit.into()));
        }
        labels
    }
}

impl Collector for GroupCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let series = self.groups.lock().map_err(|_| std::fmt::Error)?.series();
        let what = match self.label {
            "cgroup" => {
                "per cgroup (label cgroup: its cgroup v2 path below the cgroup2 mount, or cgroup ID if never named, or ? without cgroup v2; label unit: the systemd unit or 12-hex-digit container id of that path)"
            }
            _ => "per binary (label binary: the binary it ran last)",
        };
        let bounded = format!(
            "the top K by spawn cost ({}, default 20), the rest under {}=other; a series counts from when its group entered the top K, what it did before is in other",
            self.flag, self.label
        );
        let kind = ConstCounter::new(0u64).metric_type();
        let (spawns, cost) = (
            format!("forkprof_{}_spawns", self.label),
            format!("forkprof_{}_spawn_cost_seconds", self.label),
        );
        let (spawns_help, cost_help) = (
            format!("Processes finished, {what}: {bounded}"),
            format!("Total spawn_cost of the processes finished, {what}: {bounded}"),
        );
        let mut m = encoder.encode_descriptor(&spawns, &spawns_help, None, kind)?;
        for (group, n, _) in &series {
            ConstCounter::new(*n).encode(m.encode_family(&self.labels(group))?)?;
        }
        let mut m = encoder.encode_descriptor(&cost, &cost_help, None, kind)?;
        for (group, _, cost) in &series {
            ConstCounter::new(*cost as f64 / 1e9).encode(m.encode_family(&self.labels(group))?)?;
        }
        Ok(())
    }
}

pub struct Metrics {
    pub registry: Registry,
    spawns: Family<Labels, Counter>,
    threads: Counter,
    failed_spawns: Counter,
    execs: Family<Labels, Counter>,
    lost: Counter,
    in_flight: Gauge,
    vanished: Counter,
    phases: Family<Labels, Histogram>,
    /// Each phase's series of `phases`, looked up once, at its first observation (a clone
    /// shares the series): the lookup builds, hashes and frees a label set, which cost more
    /// than the observation itself, about a dozen times per process.
    phase_series: [OnceLock<Histogram>; PHASES.len()],
    cow_faults: Counter,
    binaries: Arc<Mutex<Bounded>>,
    cgroups: Arc<Mutex<Bounded>>,
    prev: Counters,
    prev_lost: u64,
}

impl Metrics {
    /// `top_binaries` and `top_cgroups`: K of the bounded per-binary and per-cgroup series.
    pub fn new(top_binaries: usize, top_cgroups: usize) -> Self {
        let mut registry = Registry::default();
        let spawns = Family::<Labels, Counter>::default();
        registry.register(
            "forkprof_spawns",
            "Processes created, by method",
            spawns.clone(),
        );
        let threads = Counter::default();
        registry.register("forkprof_threads", "Threads created", threads.clone());
        let failed_spawns = Counter::default();
        registry.register(
            "forkprof_failed_spawns",
            "fork-family syscalls that failed",
            failed_spawns.clone(),
        );
        let execs = Family::<Labels, Counter>::default();
        registry.register(
            "forkprof_execs",
            "exec attempts, by result (ok, failed)",
            execs.clone(),
        );
        let lost = Counter::default();
        registry.register(
            "forkprof_lost_events",
            "Events the kernel or the agent could not deliver",
            lost.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "forkprof_processes_followed",
            "Processes being followed now",
            in_flight.clone(),
        );
        let vanished = Counter::default();
        registry.register(
            "forkprof_processes_vanished",
            "Processes forgotten unfinished: their pid gone for a minute and no exit seen (its record lost, counted in forkprof_lost_events)",
            vanished.clone(),
        );
        let phases =
            Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new(phase_buckets()));
        registry.register(
            "forkprof_phase_duration_seconds",
            "Duration of each spawn phase, per finished process",
            phases.clone(),
        );
        let cow_faults = Counter::default();
        registry.register(
            "forkprof_cow_faults",
            "Copy-on-write faults after fork, of finished processes",
            cow_faults.clone(),
        );
        registry.register(
            "forkprof_build",
            "forkprof's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let binaries = Arc::new(Mutex::new(Bounded::new(top_binaries)));
        registry.register_collector(Box::new(GroupCollector {
            groups: binaries.clone(),
            label: "binary",
            flag: "--top-binaries",
        }));
        let cgroups = Arc::new(Mutex::new(Bounded::new(top_cgroups)));
        registry.register_collector(Box::new(GroupCollector {
            groups: cgroups.clone(),
            label: "cgroup",
            flag: "--top-cgroups",
        }));
        // Every method and result is exported from the start, at 0.
        for m in METHODS {
            let _ = spawns.get_or_create(&vec![("method", m.name().to_string())]);
        }
        for r in ["ok", "failed"] {
            let _ = execs.get_or_create(&vec![("result", r.to_string())]);
        }
        Self {
            registry,
            spawns,
            threads,
            failed_spawns,
            execs,
            lost,
            in_flight,
            vanished,
            phases,
            phase_series: Default::default(),
            cow_faults,
            binaries,
            cgroups,
            prev: Counters::default(),
            prev_lost: 0,
        }
    }

    /// Moves the counters to the live totals.
    pub fn update(&mut self, counters: &Counters, lost: u64, in_flight: usize) {
        for (i, m) in METHODS.iter().enumerate() {
            self.spawns
                .get_or_create(&vec![("method", m.name().to_string())])
                .inc_by(counters.spawns[i] - self.prev.spawns[i]);
        }
        self.threads.inc_by(counters.threads - self.prev.threads);
        self.failed_spawns
            .inc_by(counters.failed_spawns - self.prev.failed_spawns);
        self.execs
            .get_or_create(&vec![("result", "ok".to_string())])
            .inc_by(counters.execs_ok - self.prev.execs_ok);
        self.execs
            .get_or_create(&vec![("result", "failed".to_string())])
            .inc_by(counters.execs_failed - self.prev.execs_failed);
        self.lost.inc_by(lost.saturating_sub(self.prev_lost));
        self.prev_lost = self.prev_lost.max(lost);
        self.in_flight.set(in_flight as i64);
        self.vanished.inc_by(counters.vanished - self.prev.vanished);
        self.prev = counters.clone();
    }

    pub fn observe(&self, finished: &[Finished]) {
        let mut binaries = self.binaries.lock().expect("metrics lock");
        let mut cgroups = self.cgroups.lock().expect("metrics lock");
        for f in finished {
            for phase in PHASES {
                let Some(v) = f.phases.get(phase) else {
                    continue;
                };
                if phase == Phase::CowFaults {
                    self.cow_faults.inc_by(v);
                    continue;
                }
                self.phase_series[phase as usize]
                    .get_or_init(|| {
                        self.phases
                            .get_or_create(&vec![("phase", phase.name().to_string())])
                            .clone()
                    })
                    .observe(v as f64 / 1e9);
            }
            let cost = f.phases.get(Phase::SpawnCost).unwrap_or(0);
            binaries.add(&f.binary, cost);
            cgroups.add(&f.cgroup, cost);
        }
        binaries.rank();
        cgroups.rank();
    }

    /// The OpenMetrics text exposition (prometheus-client's encoding).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// The exposition in the format the scraper asked for with its `Accept` header:
    /// OpenMetrics when it lists `application/openmetrics-text`, as Prometheus itself does,
    /// else the Prometheus text format 0.0.4 that older scrapers and `promtool check
    /// metrics` read. Returns the body and its content type.
    pub fn encode_for(&self, accept: &str) -> Result<(String, &'static str), std::fmt::Error> {
        let open_metrics = self.encode()?;
        if accept.contains("application/openmetrics-text") {
            Ok((open_metrics, OPENMETRICS_CONTENT_TYPE))
        } else {
            Ok((to_text_004(&open_metrics), TEXT_004_CONTENT_TYPE))
        }
    }
}

pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_004_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics text -> Prometheus text 0.0.4. The samples are the same; what differs is in
/// the metadata: a counter's family is named with its `_total` suffix, an info metric is a
/// gauge named `..._info`, there are no `# UNIT` lines and no `# EOF`.
fn to_text_004(open_metrics: &str) -> String {
    let mut out = String::with_capacity(open_metrics.len());
    let mut kind_of = std::collections::HashMap::new();
    for line in open_metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            kind_of.insert(name.to_string(), kind.to_string());
        }
    }
    let renamed = |name: &str| -> (String, Option<&'static str>) {
        match kind_of.get(name).map(String::as_str) {
            Some("counter") if !name.ends_with("_total") => (format!("{name}_total"), None),
            Some("info") => (format!("{name}_info"), Some("gauge")),
            _ => (name.to_string(), None),
        }
    };
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# TYPE ", "# HELP "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta.and_then(|(p, rest)| rest.split_once(' ').map(|(n, r)| (p, n, r))) {
            Some((prefix, name, rest)) => {
                let (name, kind) = renamed(name);
                let rest = match (prefix, kind) {
                    ("# TYPE ", Some(kind)) => kind,
                    _ => rest,
                };
                out.push_str(&format!("{prefix}{name} {rest}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add_all(b: &mut Bounded, items: &[(&str, u64)]) {
        for (name, cost) in items {
            b.add(&Shared::from(name.as_bytes()), *cost);
        }
        b.rank();
    }

    fn value(series: &[(String, u64, u64)], label: &str) -> Option<(u64, u64)> {
        series.iter().find(|s| s.0 == label).map(|s| (s.1, s.2))
    }

    #[test]
    fn binaries_are_bounded_to_top_k_and_other() {
        let mut b = Bounded::new(2);
        // The first K groups get a series at once; then the top K by cost keep one.
        add_all(&mut b, &[("a", 10u64), ("b", 30), ("c", 20), ("d", 5)]);
        assert_eq!(
            b.series(),
            vec![
                ("b".into(), 1, 30),
                ("c".into(), 0, 0),
                ("other".into(), 2, 25)
            ]
        );
        // Far more groups than the cap: memory stays bounded and nothing is lost.
        for i in 0..10_000u64 {
            b.add(&Shared::from(format!("x{i}").as_bytes()), i);
        }
        b.rank();
        assert!(b.groups.len() <= 2 * 50 + 100);
        let shown: u64 = b.groups.values().filter_map(|g| g.shown).map(|s| s.0).sum();
        assert_eq!(shown + b.other.0, 10_004);
    }

    /// Every series only grows, `other` included, while groups enter and leave the top K,
    /// and all of them together count every process.
    #[test]
    fn series_stay_monotonic_as_groups_enter_and_leave_the_top_k() {
        let mut b = Bounded::new(2);
        let mut last: HashMap<String, (u64, u64)> = HashMap::new();
        let mut check = |b: &Bounded, added: u64| {
            let series = b.series();
            assert!(series.len() <= 3, "{series:?}");
            for (label, n, c) in &series {
                let before = last.get(label).copied().unwrap_or_default();
                assert!(
                    *n >= before.0 && *c >= before.1,
                    "{label} went down: {series:?}"
                );
                last.insert(label.clone(), (*n, *c));
            }
            let paused: u64 = b
                .groups
                .values()
                .filter(|g| !g.exported)
                .filter_map(|g| g.shown)
                .map(|s| s.0)
                .sum();
            let total: u64 = series.iter().map(|s| s.1).sum::<u64>() + paused;
            assert_eq!(total, added);
        };
        let mut added = 0;
        // a and b first; then c overtakes both, then a comes back on top.
        for (batch, items) in [
            vec![("a", 10u64), ("b", 20)],
            vec![("c", 100)],
            vec![("c", 100), ("b", 5)],
            vec![("a", 500), ("a", 500), ("c", 1)],
            vec![("b", 1000)],
        ]
        .into_iter()
        .enumerate()
        {
            added += items.len() as u64;
            add_all(&mut b, &items);
            check(&b, added);
            if batch == 1 {
                // c got a series only after its first process, which stays in other.
                assert_eq!(value(&b.series(), "c"), Some((0, 0)));
                assert_eq!(value(&b.series(), "other"), Some((1, 100)));
                assert_eq!(value(&b.series(), "a"), None, "a paused");
            }
        }
        // a left at batch 1 and came back at batch 3 with its earlier count kept: 1 before,
        // then its first process of batch 3 went to other (it had no series then), the
        // second one too (the ranking runs after the batch).
        assert_eq!(value(&b.series(), "a"), Some((1, 10)));
        // No top K at all: everything is other.
        let mut none = Bounded::new(0);
        add_all(&mut none, &[("a", 1), ("b", 2)]);
        assert_eq!(none.series(), vec![("other".into(), 2, 3)]);
    }

    #[test]
    fn cgroup_series_carry_the_unit() {
        let m = Metrics::new(5, 1);
        let finished = |cgroup: &str, cost: u64| {
            let mut phases = crate::model::Phases::default();
            phases.0[Phase::SpawnCost as usize] = Some(cost);
            Finished {
                binary: b"/bin/true".as_slice().into(),
                parent_binary: b"/bin/sh".as_slice().into(),
                method: crate::model::Method::Fork,
                phases,
                cgroup_id: 1,
                cgroup: cgroup.as_bytes().into(),
            }
        };
        m.observe(&[
            finished("/system.slice/a.service/job", 2_000_000_000),
            finished("/system.slice/b.service", 1_000_000_000),
        ]);
        let text = m.encode().unwrap();
        for want in [
            "forkprof_cgroup_spawns_total{cgroup=\"/system.slice/a.service/job\",unit=\"a.service\"} 1",
            "forkprof_cgroup_spawns_total{cgroup=\"other\",unit=\"other\"} 1",
            "forkprof_cgroup_spawn_cost_seconds_total{cgroup=\"/system.slice/a.service/job\",unit=\"a.service\"} 2.0",
            "# HELP forkprof_cgroup_spawns Processes finished, per cgroup",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        assert!(!text.contains("b.service"), "{text}");
    }

    #[test]
    fn exposition_has_the_documented_series() {
        let mut m = Metrics::new(5, 5);
        let mut c = Counters::default();
        c.spawns[0] = 3;
        c.execs_ok = 2;
        c.vanished = 6;
        m.update(&c, 1, 4);
        let text = m.encode().unwrap();
        for want in [
            "forkprof_spawns_total{method=\"fork\"} 3",
            "forkprof_spawns_total{method=\"vfork\"} 0",
            "forkprof_execs_total{result=\"ok\"} 2",
            "forkprof_lost_events_total 1",
            "forkprof_processes_followed 4",
            "forkprof_processes_vanished_total 6",
            "forkprof_build_info{version=",
            "forkprof_binary_spawns_total{binary=\"other\"} 0",
            "forkprof_cgroup_spawns_total{cgroup=\"other\",unit=\"other\"} 0",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }

    #[test]
    fn text_004_names_counters_with_total_and_info_as_a_gauge() {
        let m = Metrics::new(5, 5);
        let (text, kind) = m.encode_for("text/plain;version=0.0.4").unwrap();
        assert_eq!(kind, TEXT_004_CONTENT_TYPE);
        assert!(
            text.contains("# TYPE forkprof_spawns_total counter"),
            "{text}"
        );
        assert!(text.contains("# TYPE forkprof_build_info gauge"), "{text}");
        assert!(
            !text.contains("# EOF") && !text.contains(" info\n"),
            "{text}"
        );
        let (om, kind) = m.encode_for("application/openmetrics-text").unwrap();
        assert_eq!(kind, OPENMETRICS_CONTENT_TYPE);
        assert!(om.ends_with("# EOF\n"), "{om}");
    }
}
