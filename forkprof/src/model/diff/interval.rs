//! The statistics of `forkprof diff`: each side's values (a part per recording), and the
//! interval on the ratio of their means, as the module above describes.
use serde::Serialize;

/// Largest side for the bootstrap; above it, the delta method.
pub const BOOTSTRAP_MAX: usize = 5000;
/// Bootstrap resamples.
pub const RESAMPLES: usize = 1000;
/// Coverage of the intervals.
pub const LEVEL: f64 = 0.99;
/// The normal quantile for `LEVEL` (two-sided).
const Z: f64 = 2.575_829_303_548_901;
/// Fewer processes than this on a side: "too few processes".
pub const MIN_PROCESSES: u64 = 5;

/// Student's t quantile for `LEVEL` (two-sided, 0.995) with 1 to 30 degrees of freedom.
const T_995: [f64; 30] = [
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012,
    2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779,
    2.771, 2.763, 2.756, 2.750,
];

/// The t quantile for `LEVEL` with `df` degrees of freedom (fractional, from Welch): the
/// table up to 30, above it the Cornish-Fisher expansion around `Z` (within 0.05% at 30).
fn t_quantile(df: f64) -> f64 {
    if !df.is_finite() {
        return Z;
    }
    let df = df.max(1.0);
    if df <= 30.0 {
        // Linear between the table's integer rows.
        let lo = df.floor() as usize;
        let frac = df - lo as f64;
        let at = |d: usize| T_995[d.clamp(1, 30) - 1];
        return at(lo) + frac * (at(lo + 1) - at(lo));
    }
    let (z3, z5) = (Z.powi(3), Z.powi(5));
    Z + (z3 + Z) / (4.0 * df) + (5.0 * z5 + 16.0 * z3 + 3.0 * Z) / (96.0 * df * df)
}

/// Values of one quantity in one recording: exact moments, and the values themselves while
/// there are few enough to bootstrap.
#[derive(Clone, Debug, Default)]
struct Part {
    n: u64,
    mean: f64,
    m2: f64,
    values: Vec<u64>,
}

impl Part {
    fn add(&mut self, v: u64) {
        self.n += 1;
        let x = v as f64;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
        if self.n as usize <= BOOTSTRAP_MAX {
            self.values.push(v);
        } else if !self.values.is_empty() {
            self.values = Vec::new();
        }
    }
}

/// Values of one quantity on one side: a part per recording that has any.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    parts: Vec<Part>,
}

impl Sample {
    /// Adds a value to the last recording's part.
    pub fn add(&mut self, v: u64) {
        if self.parts.is_empty() {
            self.parts.push(Part::default());
        }
        self.parts.last_mut().expect("a part").add(v);
    }

    pub fn of(values: &[u64]) -> Self {
        let mut s = Self::default();
        values.iter().for_each(|&v| s.add(v));
        s
    }

    /// One sample per recording: `parts[i]` holds recording i's values.
    pub fn of_recordings(parts: &[&[u64]]) -> Self {
        let mut s = Self::default();
        for values in parts {
            s.append(Self::of(values));
        }
        s
    }

    /// Appends another recording's values as their own parts.
    pub fn append(&mut self, other: Sample) {
        self.parts
            .extend(other.parts.into_iter().filter(|p| p.n > 0));
    }

    pub fn n(&self) -> u64 {
        self.parts.iter().map(|p| p.n).sum()
    }

    /// The mean over all values (the recordings pooled).
    pub fn mean(&self) -> f64 {
        let n = self.n();
        if n == 0 {
            return 0.0;
        }
        self.parts.iter().map(|p| p.mean * p.n as f64).sum::<f64>() / n as f64
    }

    /// Recordings with values.
    pub fn recordings(&self) -> usize {
        self.parts.len()
    }

    /// The squared relative standard error of the mean, and its degrees of freedom: from the
    /// spread between recordings' means when there are several, else between values.
    fn relative_variance(&self) -> (f64, f64) {
        let m = self.mean();
        let k = self.parts.len();
        if k >= 2 {
            let means = self.parts.iter().map(|p| p.mean);
            let mm = means.clone().sum::<f64>() / k as f64;
            let between = means.map(|x| (x - mm) * (x - mm)).sum::<f64>() / (k - 1) as f64;
            // Recordings that happen to agree closely still have their processes' spread:
            // the variance a recording's mean would have from that alone is the floor, with
            // its own degrees of freedom.
            let n = self.n();
            let within_df = n.saturating_sub(k as u64).max(1) as f64;
            let within = self.parts.iter().map(|p| p.m2).sum::<f64>() / within_df;
            let floor = within * k as f64 / n as f64;
            if between >= floor {
                (between / (k as f64 * m * m), (k - 1) as f64)
            } else {
                (floor / (k as f64 * m * m), within_df)
            }
        } else {
            let n = self.n();
            let var = match self.parts.first() {
                Some(p) if n >= 2 => p.m2 / (n - 1) as f64,
                _ => 0.0,
            };
            (var / (n as f64 * m * m), n.saturating_sub(1) as f64)
        }
    }

    fn bootstrappable(&self) -> bool {
        self.parts.len() == 1 && self.n() as usize <= BOOTSTRAP_MAX
    }

    /// The values of its one recording, sorted: what the bootstrap resamples does not
    /// depend on the order the processes were read in (by creation in memory, by
    /// completion when a recording is streamed).
    fn sorted_values(&self) -> Vec<u64> {
        let mut v = self.parts.first().map_or(Vec::new(), |p| p.values.clone());
        v.sort_unstable();
        v
    }
}

/// A small deterministic PRNG (splitmix64).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// A seed from a name, so each row's resamples do not depend on the other rows.
pub fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalMethod {
    /// Percentile bootstrap over processes (one recording a side).
    Bootstrap,
    /// Delta method over processes (one large recording a side).
    Delta,
    /// Welch t over the recordings' means (several recordings on a side).
    Recordings,
}

/// The ratio after/before of the means, and its interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    pub method: IntervalMethod,
}

fn resample_mean(v: &[u64], rng: &mut SplitMix64) -> f64 {
    let sum: f64 = (0..v.len()).map(|_| v[rng.below(v.len())] as f64).sum();
    sum / v.len() as f64
}

/// Percentile bootstrap of mean(after)/mean(before) at `LEVEL`.
pub fn bootstrap(before: &[u64], after: &[u64], seed: u64) -> (f64, f64) {
    let mut rng = SplitMix64(seed);
    let mut ratios: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let b = resample_mean(before, &mut rng);
            let a = resample_mean(after, &mut rng);
            if b > 0.0 { a / b } else { f64::INFINITY }
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let tail = (1.0 - LEVEL) / 2.0;
    let lo = (tail * RESAMPLES as f64).floor() as usize;
    let hi = ((1.0 - tail) * RESAMPLES as f64).ceil() as usize - 1;
    (ratios[lo], ratios[hi.min(RESAMPLES - 1)])
}

/// Interval at `LEVEL` on log(mean(after)/mean(before)) from each side's relative standard
/// error: normal for one large recording a side, Welch's t where a side has several.
pub fn delta(before: &Sample, after: &Sample) -> (f64, f64) {
    let (mb, ma) = (before.mean(), after.mean());
    if ma <= 0.0 || mb <= 0.0 {
        return (0.0, 0.0);
    }
    let ratio = ma / mb;
    let (vb, db) = before.relative_variance();
    let (va, da) = after.relative_variance();
    let se2 = vb + va;
    // Welch-Satterthwaite; a side without spread adds nothing.
    let part = |v: f64, d: f64| if v > 0.0 && d > 0.0 { v * v / d } else { 0.0 };
    let denom = part(vb, db) + part(va, da);
    let q = if denom > 0.0 {
        t_quantile(se2 * se2 / denom)
    } else {
        Z
    };
    let half = q * se2.sqrt();
    (ratio * (-half).exp(), ratio * half.exp())
}

/// The ratio of means and its interval; None when before's mean is 0 or a side has < 2 values.
pub fn ratio_interval(before: &Sample, after: &Sample, seed: u64) -> Option<Interval> {
    if before.n() < 2 || after.n() < 2 || before.mean() <= 0.0 {
        return None;
    }
    let ratio = after.mean() / before.mean();
    let ((lo, hi), method) = if before.recordings() > 1 || after.recordings() > 1 {
        (delta(before, after), IntervalMethod::Recordings)
    } else if before.bootstrappable() && after.bootstrappable() {
        let ci = bootstrap(&before.sorted_values(), &after.sorted_values(), seed);
        (ci, IntervalMethod::Bootstrap)
    } else {
        (delta(before, after), IntervalMethod::Delta)
    };
    Some(Interval {
        ratio,
        lo,
        hi,
        method,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    #[serde(rename = "changed")]
    Changed,
    #[serde(rename = "no significant change")]
    NoChange,
    #[serde(rename = "new")]
    New,
    #[serde(rename = "gone")]
    Gone,
    #[serde(rename = "too few processes")]
    TooFew,
}

impl Status {
    pub fn text(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::NoChange => "no significant change",
            Self::New => "new",
            Self::Gone => "gone",
            Self::TooFew => "too few processes",
        }
    }
}

/// Judges one quantity: `noise` is the band's half-width as a fraction (0.10 for ±10%).
pub fn judge(
    before: Option<&Sample>,
    after: Option<&Sample>,
    noise: f64,
    seed: u64,
) -> (Status, Option<Interval>) {
    let (b, a) = match (before, after) {
        (None, _) => return (Status::New, None),
        (_, None) => return (Status::Gone, None),
        (Some(b), Some(a)) => (b, a),
    };
    let ci = ratio_interval(b, a, seed);
    if b.n() < MIN_PROCESSES || a.n() < MIN_PROCESSES {
        return (Status::TooFew, ci);
    }
    let status = match ci {
        Some(i) if i.lo <= 1.0 && i.hi >= 1.0 => Status::NoChange,
        Some(i) if i.lo >= 1.0 - noise && i.hi <= 1.0 + noise => Status::NoChange,
        Some(_) => Status::Changed,
        // Before's mean is 0: a change only if after's is not.
        None if a.mean() > 0.0 => Status::Changed,
        None => Status::NoChange,
    };
    (status, ci)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log-normal values with median `scale` (Box-Muller on splitmix64).
    fn lognormal(n: usize, scale: f64, sigma: f64, seed: u64) -> Vec<u64> {
        let mut rng = SplitMix64(seed);
        let mut unit = || (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        (0..n)
            .map(|_| {
                let (u1, u2) = (unit().max(1e-12), unit());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (scale * (sigma * z).exp()) as u64
            })
            .collect()
    }

    #[test]
    fn bootstrap_interval_covers_the_true_ratio() {
        // after = 1.3 × before in distribution: the true ratio of means is 1.3.
        let trials = 100;
        let covered = (0..trials)
            .filter(|&t| {
                let b = Sample::of(&lognormal(200, 100_000.0, 0.6, 2 * t + 1));
                let a = Sample::of(&lognormal(200, 130_000.0, 0.6, 2 * t + 2));
                let i = ratio_interval(&b, &a, t).unwrap();
                assert_eq!(i.method, IntervalMethod::Bootstrap);
                i.lo <= 1.3 && 1.3 <= i.hi
            })
            .count();
        // A 99% interval: 100 trials miss about once; 95 leaves room for the bootstrap's
        // slight under-coverage on skewed data.
        assert!(covered >= 95, "covered {covered} of {trials}");
    }

    #[test]
    fn delta_method_agrees_with_bootstrap_on_a_large_sample() {
        let b = lognormal(5000, 100_000.0, 0.5, 7);
        let a = lognormal(5000, 120_000.0, 0.5, 8);
        let (bl, bh) = bootstrap(&b, &a, 1);
        let (dl, dh) = delta(&Sample::of(&b), &Sample::of(&a));
        assert!((bl / dl - 1.0).abs() < 0.01, "lo {bl} vs {dl}");
        assert!((bh / dh - 1.0).abs() < 0.01, "hi {bh} vs {dh}");
        // Above BOOTSTRAP_MAX, the delta method is used.
        let big = Sample::of(&lognormal(BOOTSTRAP_MAX + 1, 1e5, 0.5, 9));
        let i = ratio_interval(&big, &big, 0).unwrap();
        assert_eq!(i.method, IntervalMethod::Delta);
        assert!(i.lo < 1.0 && i.hi > 1.0);
    }

    #[test]
    fn identical_samples_are_no_significant_change() {
        let v = lognormal(300, 80_000.0, 0.8, 3);
        let s = Sample::of(&v);
        let (status, ci) = judge(Some(&s), Some(&s), 0.10, 5);
        assert_eq!(status, Status::NoChange);
        assert_eq!(ci.unwrap().ratio, 1.0);
        // Two draws from one distribution: also no change.
        let other = Sample::of(&lognormal(300, 80_000.0, 0.8, 4));
        assert_eq!(judge(Some(&s), Some(&other), 0.10, 5).0, Status::NoChange);
    }

    #[test]
    fn a_doubling_is_significant_and_a_small_shift_is_noise() {
        let b = Sample::of(&lognormal(300, 80_000.0, 0.5, 11));
        let a = Sample::of(&lognormal(300, 160_000.0, 0.5, 12));
        let (status, ci) = judge(Some(&b), Some(&a), 0.10, 1);
        assert_eq!(status, Status::Changed);
        let ci = ci.unwrap();
        assert!(ci.lo > 1.5 && ci.hi < 2.6, "{ci:?}");
        // A 3% shift measured very precisely: outside 1, inside the noise band.
        let b = Sample::of(&[100_000; 50_000]);
        let mut a = Sample::of(&[103_000; 49_999]);
        a.add(103_001);
        assert_eq!(judge(Some(&b), Some(&a), 0.10, 1).0, Status::NoChange);
        assert_eq!(judge(Some(&b), Some(&a), 0.01, 1).0, Status::Changed);
    }

    /// `k` recordings of ~`n` processes each, recording i at `scale * speeds[i]`.
    fn drifting(speeds: &[f64], scale: f64, seed: u64) -> Sample {
        let mut s = Sample::default();
        for (i, speed) in speeds.iter().enumerate() {
            s.append(Sample::of(&lognormal(
                200,
                scale * speed,
                0.5,
                seed + i as u64,
            )));
        }
        s
    }

    #[test]
    fn drift_between_recordings_is_no_change_with_several_a_side() {
        // The same workload on a machine whose speed moved by a quarter between runs.
        let b = drifting(&[1.0, 1.25, 1.0], 100_000.0, 100);
        let a = drifting(&[1.25, 1.0, 1.3], 100_000.0, 200);
        assert_eq!(b.recordings(), 3);
        let (status, ci) = judge(Some(&b), Some(&a), 0.10, 1);
        let ci = ci.unwrap();
        assert_eq!(ci.method, IntervalMethod::Recordings);
        assert_eq!(status, Status::NoChange, "{ci:?}");
        // One recording a side, pooled, the same values are called a change: the drift is
        // not in a process-level interval.
        let pool = |s: &Sample| {
            let v: Vec<u64> = s.parts.iter().flat_map(|p| p.values.clone()).collect();
            Sample::of(&v)
        };
        let (b1, a1) = (pool(&b), pool(&a));
        assert_eq!(b1.recordings(), 1);
        assert_eq!(judge(Some(&b1), Some(&a1), 0.10, 1).0, Status::Changed);
    }

    #[test]
    fn a_doubling_through_the_drift_is_still_a_change() {
        let b = drifting(&[1.0, 1.25, 1.1], 100_000.0, 300);
        let a = drifting(&[1.2, 1.0, 1.15], 200_000.0, 400);
        let (status, ci) = judge(Some(&b), Some(&a), 0.10, 1);
        assert_eq!(status, Status::Changed, "{ci:?}");
        let ci = ci.unwrap();
        // Three runs a side with a ±12% drift: Welch's t on about 4 degrees of freedom is
        // wide, but a doubling clears the band.
        assert!(
            ci.lo > 1.1 && ci.lo < 2.0 && ci.hi > 2.0 && ci.hi < 4.0,
            "{ci:?}"
        );
    }

    #[test]
    fn identical_recordings_keep_their_processes_spread() {
        let v = lognormal(200, 100_000.0, 0.5, 9);
        let b = Sample::of_recordings(&[&v, &v]);
        let a = Sample::of_recordings(&[&v, &v]);
        let ci = ratio_interval(&b, &a, 0).unwrap();
        assert!(ci.lo < 0.99 && ci.hi > 1.01, "{ci:?}");
    }

    #[test]
    fn t_quantiles() {
        assert!((t_quantile(1.0) - 63.657).abs() < 1e-9);
        assert!((t_quantile(2.5) - (9.925 + 5.841) / 2.0).abs() < 1e-9);
        assert!((t_quantile(30.0) - 2.750).abs() < 1e-9);
        // The expansion continues the table smoothly, and tends to the normal quantile.
        assert!((t_quantile(30.001) - 2.750).abs() < 0.002);
        assert!((t_quantile(120.0) - 2.617).abs() < 0.001);
        assert!((t_quantile(1e12) - Z).abs() < 1e-9);
        assert_eq!(t_quantile(f64::INFINITY), Z);
    }

    #[test]
    fn new_gone_and_too_few() {
        let s = Sample::of(&[1, 2, 3, 4, 5, 6]);
        let few = Sample::of(&[1, 2, 3]);
        assert_eq!(judge(None, Some(&s), 0.1, 0).0, Status::New);
        assert_eq!(judge(Some(&s), None, 0.1, 0).0, Status::Gone);
        assert_eq!(judge(Some(&few), Some(&s), 0.1, 0).0, Status::TooFew);
    }
}
