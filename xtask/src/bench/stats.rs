//! Order statistics of the samples: medians, their confidence intervals, min and max.

/// The median, or None for no values.
pub(super) fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// A confidence interval of at least 90% for the median of `values`: the order statistics
/// x(k) and x(n+1-k) with the largest k whose coverage, 1 - 2 P(Binomial(n, 1/2) < k),
/// is still 90% or more. It assumes nothing about the distribution; with 5 values it is
/// [min, max] (93.75%), and with fewer than 5 there is none.
pub(super) fn median_ci90(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    // P(B <= j) for B ~ Binomial(n, 1/2), j = 0, 1, ...
    let mut term = 0.5f64.powi(i32::try_from(n).ok()?);
    let mut below = 0.0; // P(B < k)
    let mut k = 0;
    while k < n / 2 {
        // coverage of [x(k+1), x(n-k)] is 1 - 2 P(B <= k)
        if 1.0 - 2.0 * (below + term) < 0.90 {
            break;
        }
        below += term;
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    if k == 0 {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    Some((v[k - 1], v[n - k]))
}

pub(super) fn min(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::min)
}

pub(super) fn max(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::max)
}

/// A ratio as the percentage it adds: 1.25 is "+25.0%".
pub(super) fn pct(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn median_interval_uses_order_statistics() {
        assert_eq!(median_ci90(&[1.0, 2.0, 3.0, 4.0]), None);
        assert_eq!(median_ci90(&[5.0, 1.0, 3.0, 2.0, 4.0]), Some((1.0, 5.0)));
        // n = 20: P(B <= 5) = 0.0207, P(B <= 6) = 0.0577: [x(6), x(15)], 95.9%
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(median_ci90(&values), Some((6.0, 15.0)));
    }

    #[test]
    fn percentages() {
        assert_eq!(pct(1.25), "+25.0%");
        assert_eq!(pct(0.9), "-10.0%");
        assert_eq!(
            (min(&[2.0, 1.0, 3.0]), max(&[2.0, 1.0, 3.0])),
            (Some(1.0), Some(3.0))
        );
        assert_eq!(min(&[]), None);
    }
}
