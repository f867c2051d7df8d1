//! Summary statistics of a set of durations or counts.
use serde::Serialize;

/// count, total, mean and percentiles (nearest-rank) of a phase over processes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub total: u64,
    pub mean: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl Summary {
    pub fn of(values: &mut [u64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let count = values.len() as u64;
        let total: u64 = values.iter().sum();
        Self {
            count,
            total,
            mean: total / count,
            p50: percentile(values, 50),
            p90: percentile(values, 90),
            p99: percentile(values, 99),
            max: *values.last().expect("non-empty"),
        }
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
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = Summary::of(&mut v);
        assert_eq!((s.count, s.total, s.mean), (100, 5050, 50));
        assert_eq!((s.p50, s.p90, s.p99, s.max), (50, 90, 99, 100));
        assert_eq!(Summary::of(&mut []), Summary::default());
        let one = Summary::of(&mut [7]);
        assert_eq!((one.p50, one.p99), (7, 7));
    }
}
