//! The Prometheus metrics of `forkprof monitor`, kept with the prometheus-client crate.
//! Counters move by the deltas of the live counters; each finished process is observed in
//! the phase histograms; per-binary series are bounded to the top K binaries by total spawn
//! cost, the rest summed under `binary="other"`.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

/// Cumulative per-binary totals; at most `cap` binaries are kept by name.
#[derive(Debug, Default)]
struct Binaries {
    by_name: HashMap<Shared, (u64, u64)>,
    evicted: (u64, u64),
    top: usize,
}

impl Binaries {
    fn add(&mut self, binary: &Shared, cost_ns: u64) {
        let e = self.by_name.entry(binary.clone()).or_default();
        e.0 += 1;
        e.1 += cost_ns;
        let cap = self.top * 50 + 100;
        if self.by_name.len() > cap {
            // Fold the cheapest half into `other` so that memory stays bounded.
            let mut all: Vec<(Shared, (u64, u64))> = self.by_name.drain().collect();
            all.sort_by_key(|e| std::cmp::Reverse(e.1.1));
            for (_, (n, c)) in all.split_off(cap / 2) {
                self.evicted.0 += n;
                self.evicted.1 += c;
            }
            self.by_name = all.into_iter().collect();
        }
    }

    /// The top binaries by cost and `other`: (label, spawns, cost_ns).
    fn series(&self) -> Vec<(String, u64, u64)> {
        let mut all: Vec<(&Shared, &(u64, u64))> = self.by_name.iter().collect();
        all.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(a.0.cmp(b.0)));
        let mut out: Vec<(String, u64, u64)> = all
            .iter()
            .take(self.top)
            .map(|(b, (n, c))| (escape(b), *n, *c))
            .collect();
        let rest = all
            .iter()
            .skip(self.top)
            .fold(self.evicted, |acc, (_, (n, c))| (acc.0 + n, acc.1 + c));
        out.push(("other".into(), rest.0, rest.1));
        out
    }
}

#[derive(Debug)]
struct BinaryCollector(Arc<Mutex<Binaries>>);

impl Collector for BinaryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let series = self.0.lock().map_err(|_| std::fmt::Error)?.series();
        let spawns = ConstCounter::new(0u64);
        let mut m = encoder.encode_descriptor(
            "forkprof_binary_spawns",
            "Processes finished, per binary (top K by spawn cost; the rest under other)",
            None,
            spawns.metric_type(),
        )?;
        for (binary, n, _) in &series {
            let labels = [("binary", binary.as_str())];
            ConstCounter::new(*n).encode(m.encode_family(&labels)?)?;
        }
        let mut m = encoder.encode_descriptor(
            "forkprof_binary_spawn_cost_seconds",
            "Total spawn_cost of the processes finished, per binary",
            None,
            spawns.metric_type(),
        )?;
        for (binary, _, cost) in &series {
            let labels = [("binary", binary.as_str())];
            ConstCounter::new(*cost as f64 / 1e9).encode(m.encode_family(&labels)?)?;
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
    phases: Family<Labels, Histogram>,
    cow_faults: Counter,
    binaries: Arc<Mutex<Binaries>>,
    prev: Counters,
    prev_lost: u64,
}

impl Metrics {
    pub fn new(top_binaries: usize) -> Self {
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
        let binaries = Arc::new(Mutex::new(Binaries {
            top: top_binaries,
            ..Default::default()
        }));
        registry.register_collector(Box::new(BinaryCollector(binaries.clone())));
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
            phases,
            cow_faults,
            binaries,
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
        self.prev = counters.clone();
    }

    pub fn observe(&self, finished: &[Finished]) {
        let mut binaries = self.binaries.lock().expect("metrics lock");
        for f in finished {
            for phase in PHASES {
                let Some(v) = f.phases.get(phase) else {
                    continue;
                };
                if phase == Phase::CowFaults {
                    self.cow_faults.inc_by(v);
                    continue;
                }
                self.phases
                    .get_or_create(&vec![("phase", phase.name().to_string())])
                    .observe(v as f64 / 1e9);
            }
            binaries.add(&f.binary, f.phases.get(Phase::SpawnCost).unwrap_or(0));
        }
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

    #[test]
    fn binaries_are_bounded_to_top_k_and_other() {
        let mut b = Binaries {
            top: 2,
            ..Default::default()
        };
        for (name, cost) in [("a", 10u64), ("b", 30), ("c", 20), ("d", 5)] {
            b.add(&Shared::from(name.as_bytes()), cost);
        }
        let s = b.series();
        assert_eq!(
            s,
            vec![
                ("b".into(), 1, 30),
                ("c".into(), 1, 20),
                ("other".into(), 2, 15)
            ]
        );
        // Far more binaries than the cap: memory stays bounded and nothing is lost.
        for i in 0..10_000u64 {
            b.add(&Shared::from(format!("x{i}").as_bytes()), i);
        }
        assert!(b.by_name.len() <= 2 * 50 + 100);
        let total: u64 = b.series().iter().map(|s| s.1).sum();
        assert_eq!(total, 10_004);
    }

    #[test]
    fn exposition_has_the_documented_series() {
        let mut m = Metrics::new(5);
        let mut c = Counters::default();
        c.spawns[0] = 3;
        c.execs_ok = 2;
        m.update(&c, 1, 4);
        let text = m.encode().unwrap();
        for want in [
            "forkprof_spawns_total{method=\"fork\"} 3",
            "forkprof_spawns_total{method=\"vfork\"} 0",
            "forkprof_execs_total{result=\"ok\"} 2",
            "forkprof_lost_events_total 1",
            "forkprof_processes_followed 4",
            "forkprof_build_info{version=",
            "forkprof_binary_spawns_total{binary=\"other\"} 0",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }

    #[test]
    fn text_004_names_counters_with_total_and_info_as_a_gauge() {
        let m = Metrics::new(5);
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
