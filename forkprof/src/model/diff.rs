//! `forkprof diff`: two reports compared group by group, with a 99% interval on each ratio of means.
//!
//! Spawn costs are skewed and noisy, so there is no t-test on means. The ratio after/before
//! of the mean gets a percentile bootstrap (`RESAMPLES` resamples of each side, a seeded
//! splitmix64, so the output is deterministic) while each side has at most `BOOTSTRAP_MAX`
//! values; above that, a delta-method interval on the log of the ratio, which is accurate at
//! that size and costs nothing. A change is significant only when the interval excludes 1
//! and leaves the noise band (±`noise` around 1): a VM's speed alone drifts by a few %.
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::phases::{PHASES, Phase, Phases};
use super::report::{Context, GroupBy, GroupRow, Report, ancestries, escape};
use super::stats::Summary;
use super::trace::{Shared, Trace};

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

/// Values of one quantity on one side: exact moments, and the values themselves while there
/// are few enough to bootstrap.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    n: u64,
    mean: f64,
    m2: f64,
    values: Vec<u64>,
}

impl Sample {
    pub fn add(&mut self, v: u64) {
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

    pub fn of(values: &[u64]) -> Self {
        let mut s = Self::default();
        values.iter().for_each(|&v| s.add(v));
        s
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    pub fn mean(&self) -> f64 {
        self.mean
    }

    fn variance(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            self.m2 / (self.n - 1) as f64
        }
    }

    fn bootstrappable(&self) -> bool {
        self.n as usize <= BOOTSTRAP_MAX
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
    Bootstrap,
    Delta,
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

/// Delta-method interval at `LEVEL` on log(mean(after)/mean(before)).
pub fn delta(before: &Sample, after: &Sample) -> (f64, f64) {
    let (mb, ma) = (before.mean(), after.mean());
    let ratio = ma / mb;
    if ma <= 0.0 {
        return (0.0, 0.0);
    }
    let rel = |s: &Sample, m: f64| s.variance() / (s.n as f64 * m * m);
    let se = (rel(before, mb) + rel(after, ma)).sqrt();
    (ratio * (-Z * se).exp(), ratio * (Z * se).exp())
}

/// The ratio of means and its interval; None when before's mean is 0 or a side has < 2 values.
pub fn ratio_interval(before: &Sample, after: &Sample, seed: u64) -> Option<Interval> {
    if before.n < 2 || after.n < 2 || before.mean() <= 0.0 {
        return None;
    }
    let ratio = after.mean() / before.mean();
    let ((lo, hi), method) = if before.bootstrappable() && after.bootstrappable() {
        let ci = bootstrap(&before.values, &after.values, seed);
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
    if b.n < MIN_PROCESSES || a.n < MIN_PROCESSES {
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

/// One recording, reported and sampled: spawn cost per group and every phase for the run.
pub struct Side {
    pub report: Report,
    /// Group key -> spawn_cost of each of its processes.
    pub groups: HashMap<String, Sample>,
    /// Per phase (indexed by `Phase as usize`): its value in each process.
    pub phases: Vec<Sample>,
}

impl Side {
    /// `ctx.groupings` must contain `by`.
    pub fn build(trace: &Trace, ctx: &Context<'_>, by: GroupBy) -> Self {
        let report = Report::build(trace, ctx);
        let order = trace.by_start();
        let binaries = trace.binaries(&order);
        let ancestry = if by == GroupBy::Ancestry {
            ancestries(trace, &order, &binaries)
        } else {
            Vec::new()
        };
        let mut groups: HashMap<Shared, Sample> = HashMap::new();
        let mut phases = vec![Sample::default(); PHASES.len()];
        let mut method_keys: HashMap<&'static str, Shared> = HashMap::new();
        for &i in &order {
            let p = &trace.processes[i];
            let bins = &binaries[i];
            let is_static = p.execs.iter().any(|e| e.errno == 0) && (ctx.is_static)(&bins.last);
            let ph = Phases::of(p, is_static);
            for phase in PHASES {
                if let Some(v) = ph.get(phase) {
                    phases[phase as usize].add(v);
                }
            }
            let Some(cost) = ph.get(Phase::SpawnCost) else {
                continue;
            };
            let key = match by {
                GroupBy::Binary => &bins.last,
                GroupBy::Parent => &bins.at_spawn,
                GroupBy::Ancestry => &ancestry[i],
                GroupBy::Method => method_keys
                    .entry(p.method.name())
                    .or_insert_with(|| Shared::from(p.method.name().as_bytes())),
            };
            match groups.get_mut(key) {
                Some(s) => s.add(cost),
                None => groups.entry(key.clone()).or_default().add(cost),
            }
        }
        let groups = groups.into_iter().map(|(k, v)| (escape(&k), v)).collect();
        Self {
            report,
            groups,
            phases,
        }
    }

    fn rows(&self, by: GroupBy) -> BTreeMap<&str, &GroupRow> {
        self.report
            .group(by)
            .iter()
            .filter(|r| r.processes > 0)
            .map(|r| (r.binary.as_str(), r))
            .collect()
    }
}

/// Count, mean and total of a quantity on one side.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub processes: u64,
    pub mean_ns: u64,
    pub total_ns: u64,
}

fn stats(processes: u64, s: Option<&Summary>) -> Stats {
    Stats {
        processes,
        mean_ns: s.map_or(0, |s| s.mean),
        total_ns: s.map_or(0, |s| s.total),
    }
}

/// Rounds a ratio for output, so that the JSON stays readable.
fn round(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e4).round() / 1e4
    } else {
        x
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub group: String,
    pub status: Status,
    pub before: Option<Stats>,
    pub after: Option<Stats>,
    /// mean(after) / mean(before) of spawn_cost.
    pub ratio: Option<f64>,
    /// Its `LEVEL` interval.
    pub ci: Option<[f64; 2]>,
    pub interval_method: Option<IntervalMethod>,
    /// The part of spawn_cost whose mean moved most, and by how much (ns, after - before).
    pub moved_phase: Option<&'static str>,
    pub moved_ns: Option<i64>,
}

impl Row {
    /// after total - before total, ns.
    pub fn total_change(&self) -> i64 {
        let t = |s: &Option<Stats>| s.as_ref().map_or(0, |s| s.total_ns as i64);
        t(&self.after) - t(&self.before)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PhaseRow {
    pub phase: Phase,
    pub status: Status,
    /// `processes` is the number of processes with the phase measured.
    pub before: Option<Stats>,
    pub after: Option<Stats>,
    pub ratio: Option<f64>,
    pub ci: Option<[f64; 2]>,
}

#[derive(Clone, Debug, Serialize)]
pub struct HintCheck {
    pub rule: &'static str,
    /// The group the hint names (a binary's or parent's base name), if any.
    pub group: Option<String>,
    /// BEFORE's text (AFTER's for a new hint).
    pub text: String,
    /// "still triggered", "resolved" or "new".
    pub status: &'static str,
    /// Total spawn_cost of the hint's group, before - after (ns): what the change saved.
    pub saved_ns: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub before: String,
    pub after: String,
    pub by: &'static str,
    /// The noise band, in % either side of 1.
    pub noise: f64,
    pub notes: Vec<String>,
    pub rows: Vec<Row>,
    pub phases: Vec<PhaseRow>,
    pub hints: Vec<HintCheck>,
}

/// The part of spawn_cost whose mean moved most (ns, after - before). A part is refined to
/// its sub-phase (fork: pagetable_copy; exec: exec_prepare, exec_load) when that sub-phase
/// moved the same way by at least half as much.
fn moved(b: Option<&GroupRow>, a: Option<&GroupRow>) -> Option<(&'static str, i64)> {
    let change = |p: Phase| {
        let mean =
            |r: Option<&GroupRow>| r.and_then(|r| r.phases.get(p)).map_or(0, |s| s.mean as i64);
        mean(a) - mean(b)
    };
    let (part, d) = Phase::SPAWN_COST_PARTS
        .iter()
        .map(|&p| (p, change(p)))
        .filter(|&(_, d)| d != 0)
        .max_by_key(|&(p, d)| (d.unsigned_abs(), std::cmp::Reverse(p)))?;
    let subs: &[Phase] = match part {
        Phase::Fork => &[Phase::PagetableCopy],
        Phase::Exec => &[Phase::ExecPrepare, Phase::ExecLoad],
        _ => &[],
    };
    let refined = subs
        .iter()
        .map(|&p| (p, change(p)))
        .filter(|&(_, s)| s.signum() == d.signum() && 2 * s.unsigned_abs() >= d.unsigned_abs())
        .max_by_key(|&(_, s)| s.unsigned_abs());
    let (phase, d) = refined.unwrap_or((part, d));
    Some((phase.name(), d))
}

fn interval_fields(ci: Option<Interval>) -> (Option<f64>, Option<[f64; 2]>) {
    (
        ci.map(|i| round(i.ratio)),
        ci.map(|i| [round(i.lo), round(i.hi)]),
    )
}

fn group_rows(before: &Side, after: &Side, by: GroupBy, noise: f64) -> Vec<Row> {
    let (rb, ra) = (before.rows(by), after.rows(by));
    let mut keys: Vec<&str> = rb.keys().chain(ra.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let empty = Sample::default();
    let mut rows: Vec<Row> = keys
        .into_iter()
        .map(|k| {
            let (b, a) = (rb.get(k).copied(), ra.get(k).copied());
            let sb = b.map(|_| before.groups.get(k).unwrap_or(&empty));
            let sa = a.map(|_| after.groups.get(k).unwrap_or(&empty));
            let (status, ci) = judge(sb, sa, noise, seed_of(k));
            let (ratio, ci_pair) = interval_fields(ci);
            let spawn = |r: &GroupRow| stats(r.processes, r.phases.get(Phase::SpawnCost));
            let mv = moved(b, a);
            Row {
                group: k.to_string(),
                status,
                before: b.map(spawn),
                after: a.map(spawn),
                ratio,
                ci: ci_pair,
                interval_method: ci.map(|i| i.method),
                moved_phase: mv.map(|m| m.0),
                moved_ns: mv.map(|m| m.1),
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        y.total_change()
            .unsigned_abs()
            .cmp(&x.total_change().unsigned_abs())
            .then_with(|| x.group.cmp(&y.group))
    });
    rows
}

fn phase_rows(before: &Side, after: &Side, noise: f64) -> Vec<PhaseRow> {
    PHASES
        .iter()
        .filter_map(|&phase| {
            let (sb, sa) = (
                before.report.phases.get(phase),
                after.report.phases.get(phase),
            );
            if sb.is_none() && sa.is_none() {
                return None;
            }
            let i = phase as usize;
            let xb = sb.map(|_| &before.phases[i]).filter(|x| x.n > 0);
            let xa = sa.map(|_| &after.phases[i]).filter(|x| x.n > 0);
            let (status, ci) = judge(xb, xa, noise, seed_of(phase.name()));
            let (ratio, ci) = interval_fields(ci);
            Some(PhaseRow {
                phase,
                status,
                before: sb.map(|s| stats(s.count, Some(s))),
                after: sa.map(|s| stats(s.count, Some(s))),
                ratio,
                ci,
            })
        })
        .collect()
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The first `name` quoted in backticks in a hint's text.
fn hint_group(text: &str) -> Option<String> {
    let start = text.find('`')? + 1;
    let len = text[start..].find('`')?;
    Some(text[start..start + len].to_string())
}

/// Total spawn_cost of the rows (of the grouping the hint's rule looks at) named `group`.
fn hint_cost(side: &Side, rule: &str, group: Option<&str>) -> u64 {
    let total = |r: &GroupRow| r.phases.get(Phase::SpawnCost).map_or(0, |s| s.total);
    let by = match rule {
        "dynamic_linking" => GroupBy::Binary,
        "pagetable_copy" | "path_search" => GroupBy::Parent,
        _ => {
            return side
                .report
                .phases
                .get(Phase::SpawnCost)
                .map_or(0, |s| s.total);
        }
    };
    side.report
        .group(by)
        .iter()
        .filter(|r| group.is_none_or(|g| base(&r.binary) == g))
        .map(total)
        .sum()
}

fn hint_checks(before: &Side, after: &Side) -> Vec<HintCheck> {
    let key = |h: &super::hints::Hint| (h.rule, hint_group(&h.text));
    let in_after: Vec<_> = after.report.hints.iter().map(key).collect();
    let in_before: Vec<_> = before.report.hints.iter().map(key).collect();
    let check = |h: &super::hints::Hint, status: &'static str| {
        let group = hint_group(&h.text);
        let saved = hint_cost(before, h.rule, group.as_deref()) as i64
            - hint_cost(after, h.rule, group.as_deref()) as i64;
        HintCheck {
            rule: h.rule,
            group,
            text: h.text.clone(),
            status,
            saved_ns: Some(saved),
        }
    };
    let mut out: Vec<HintCheck> = before
        .report
        .hints
        .iter()
        .map(|h| {
            let still = in_after.contains(&key(h));
            check(h, if still { "still triggered" } else { "resolved" })
        })
        .collect();
    out.extend(
        after
            .report
            .hints
            .iter()
            .filter(|h| !in_before.contains(&key(h)))
            .map(|h| check(h, "new")),
    );
    out
}

/// Compares two sides grouped `by`; `noise_pct` is the band in % (10 for ±10%).
pub fn compare(before: &Side, after: &Side, by: GroupBy, noise_pct: f64) -> Diff {
    let noise = noise_pct / 100.0;
    Diff {
        before: String::new(),
        after: String::new(),
        by: by.name(),
        noise: noise_pct,
        notes: Vec::new(),
        rows: group_rows(before, after, by, noise),
        phases: phase_rows(before, after, noise),
        hints: hint_checks(before, after),
    }
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

    #[test]
    fn new_gone_and_too_few() {
        let s = Sample::of(&[1, 2, 3, 4, 5, 6]);
        let few = Sample::of(&[1, 2, 3]);
        assert_eq!(judge(None, Some(&s), 0.1, 0).0, Status::New);
        assert_eq!(judge(Some(&s), None, 0.1, 0).0, Status::Gone);
        assert_eq!(judge(Some(&few), Some(&s), 0.1, 0).0, Status::TooFew);
    }

    #[test]
    fn hint_groups_are_the_first_quoted_name() {
        assert_eq!(
            hint_group("`cc1` is dynamically linked: `x`").as_deref(),
            Some("cc1")
        );
        assert_eq!(hint_group("atime updates on exec"), None);
    }
}
