//! Summary statistics of a set of durations or counts.
//!
//! Values are kept exactly up to `EXACT_MAX` of them (nearest-rank percentiles); past that
//! they go into an HDR histogram (2 significant digits: percentiles within 1%), so that a
//! report over millions of processes stays within bounded memory. Count, total, mean and max
//! are always exact.
use hdrhistogram::Histogram;
use serde::Serialize;

/// count, total, mean and percentiles of a phase over processes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub total: u64,
    pub mean: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// True when p50, p90 and p99 come from an HDR histogram (more than `EXACT_MAX`
    /// values: within 1%); absent when they are exact (nearest rank over every value).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub percentiles_from_histogram: bool,
}

pub const EXACT_MAX: usize = 4096;

#[derive(Clone, Debug)]
enum Values {
    Exact(Vec<u64>),
    Hist(Box<Histogram<u64>>),
}

/// Collects values, then summarises them.
#[derive(Clone, Debug)]
pub struct Accumulator {
    count: u64,
    total: u64,
    max: u64,
    values: Values,
}

impl Default for Accumulator {
    fn default() -> Self {
        Self {
            count: 0,
            total: 0,
            max: 0,
            values: Values::Exact(Vec::new()),
        }
    }
}

impl Accumulator {
    pub fn add(&mut self, v: u64) {
        self.count += 1;
        self.total = self.total.saturating_add(v);
        self.max = self.max.max(v);
        match &mut self.values {
            Values::Exact(vals) if vals.len() < EXACT_MAX => vals.push(v),
            Values::Exact(vals) => {
                let mut h = Histogram::new(2).expect("2 significant digits is valid");
                for &x in vals.iter() {
                    let _ = h.record(x);
                }
                let _ = h.record(v);
                self.values = Values::Hist(Box::new(h));
            }
            Values::Hist(h) => {
                let _ = h.record(v);
            }
        }
    }

    pub fn summary(&mut self) -> Summary {
        if self.count == 0 {
            return Summary::default();
        }
        let from_histogram = matches!(self.values, Values::Hist(_));
        let (p50, p90, p99) = match &mut self.values {
            Values::Exact(vals) => {
                vals.sort_unstable();
                (
                    percentile(vals, 50),
                    percentile(vals, 90),
                    percentile(vals, 99),
                )
            }
            Values::Hist(h) => (
                h.value_at_quantile(0.50).min(self.max),
                h.value_at_quantile(0.90).min(self.max),
                h.value_at_quantile(0.99).min(self.max),
            ),
        };
        Summary {
            count: self.count,
            total: self.total,
            mean: self.total / self.count,
            p50,
            p90,
            p99,
            max: self.max,
            percentiles_from_histogram: from_histogram,
        }
    }
}

impl Summary {
    pub fn of(values: &[u64]) -> Self {
        let mut acc = Accumulator::default();
        for &v in values {
            acc.add(v);
        }
        acc.summary()
    }
}

/// Nearest-rank percentile of sorted, non-empty values.
fn percentile(sorted: &[u64], p: u64) -> u64 {
    let rank = (p * sorted.len() as u64).div_ceil(100).max(1);
    sorted[rank as usize - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).rev().collect();
        let s = Summary::of(&v);
        assert_eq!((s.count, s.total, s.mean), (100, 5050, 50));
        assert_eq!((s.p50, s.p90, s.p99, s.max), (50, 90, 99, 100));
        assert_eq!(Summary::of(&[]), Summary::default());
        let one = Summary::of(&[7]);
        assert_eq!((one.p50, one.p99), (7, 7));
    }

    #[test]
    fn many_values_switch_to_a_histogram_within_one_percent() {
        let v: Vec<u64> = (1..=100_000u64).map(|i| i * 1000).collect();
        let s = Summary::of(&v);
        assert_eq!(s.count, 100_000);
        assert_eq!(s.total, v.iter().sum::<u64>());
        assert_eq!(s.max, 100_000_000);
        assert!(s.percentiles_from_histogram);
        assert!(!Summary::of(&v[..EXACT_MAX]).percentiles_from_histogram);
        for (got, want) in [
            (s.p50, 50_000_000.0),
            (s.p90, 90_000_000.0),
            (s.p99, 99_000_000.0),
        ] {
            assert!((got as f64 - want).abs() / want < 0.01, "{got} vs {want}");
        }
    }
}
