//! `forkprof diff`: two sides compared group by group, with a 99% interval on each ratio of
//! means. A side is one recording, or several runs of the same thing.
//!
//! Spawn costs are skewed and noisy, so there is no t-test on means. With one recording a
//! side, the ratio after/before of the mean gets a percentile bootstrap over the processes
//! (`RESAMPLES` resamples of each side, a seeded splitmix64, so the output is deterministic)
//! while each side has at most `BOOTSTRAP_MAX` values; above that, a delta-method interval on
//! the log of the ratio, which is accurate at that size and costs nothing. Such an interval
//! covers the spread between processes, not the machine's drift between two runs (a VM's
//! speed moves by a quarter within seconds). With several recordings a side, each recording's
//! mean is one observation: a Welch t interval on the log of the ratio, from the spread
//! between recordings, which contains both. A change is significant only when the interval
//! excludes 1 and leaves the noise band (±`noise` around 1).
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::hints::Hint;
use super::phases::{PHASES, Phase, Phases};
use super::report::{Context, GroupBy, GroupRow, Report, ancestries, cgroup_keys, escape};
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

    fn values(&self) -> &[u64] {
        self.parts.first().map_or(&[], |p| &p.values)
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
        let ci = bootstrap(before.values(), after.values(), seed);
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

/// Count and total of one quantity (ns), summed over a side's recordings.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    count: u64,
    total: u64,
}

impl Tally {
    fn mean(&self) -> u64 {
        self.total.checked_div(self.count).unwrap_or(0)
    }
}

/// One group on one side, summed over the side's recordings, as its report rows say.
#[derive(Clone, Debug, Default)]
struct GroupTally {
    processes: u64,
    /// Indexed by `Phase as usize`; None where no recording measured the phase.
    phases: Vec<Option<Tally>>,
}

fn add_tally(into: &mut Option<Tally>, count: u64, total: u64) {
    let t = into.get_or_insert_with(Tally::default);
    t.count += count;
    t.total += total;
}

/// One side of a diff: one or more recordings, reported and sampled. Spawn cost per group
/// and every phase, with a part per recording.
pub struct Side {
    /// One per recording.
    pub reports: Vec<Report>,
    /// Group key -> spawn_cost of each of its processes.
    groups: HashMap<String, Sample>,
    /// Group key -> its rows' counts and phase totals (groups with processes only).
    tallies: BTreeMap<String, GroupTally>,
    /// Per phase (indexed by `Phase as usize`): its value in each process.
    phases: Vec<Sample>,
    /// Per phase: the reports' counts and totals.
    phase_tallies: Vec<Option<Tally>>,
}

impl Side {
    /// One recording. `ctx.groupings` must contain `by`.
    pub fn build(trace: &Trace, ctx: &Context<'_>, by: GroupBy) -> Self {
        let report = Report::build(trace, ctx);
        let order = trace.by_start();
        let binaries = trace.binaries(&order);
        let ancestry = if by == GroupBy::Ancestry {
            ancestries(trace, &order, &binaries)
        } else {
            Vec::new()
        };
        let cgroups = cgroup_keys(trace, by);
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
                GroupBy::Cgroup | GroupBy::Unit => &cgroups[i],
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
        let tallies = report
            .group(by)
            .iter()
            .filter(|r| r.processes > 0)
            .map(|r| {
                let mut t = GroupTally {
                    processes: r.processes,
                    phases: vec![None; PHASES.len()],
                };
                for phase in PHASES {
                    if let Some(s) = r.phases.get(phase) {
                        add_tally(&mut t.phases[phase as usize], s.count, s.total);
                    }
                }
                (r.binary.clone(), t)
            })
            .collect();
        let mut phase_tallies = vec![None; PHASES.len()];
        for phase in PHASES {
            if let Some(s) = report.phases.get(phase) {
                add_tally(&mut phase_tallies[phase as usize], s.count, s.total);
            }
        }
        Self {
            reports: vec![report],
            groups,
            tallies,
            phases,
            phase_tallies,
        }
    }

    /// Several recordings of one side as one: their values kept apart per recording.
    pub fn merge(sides: Vec<Side>) -> Self {
        let mut it = sides.into_iter();
        let mut side = it.next().expect("a side has a recording");
        for other in it {
            side.reports.extend(other.reports);
            for (k, s) in other.groups {
                side.groups.entry(k).or_default().append(s);
            }
            for (k, t) in other.tallies {
                let into = side.tallies.entry(k).or_insert_with(|| GroupTally {
                    processes: 0,
                    phases: vec![None; PHASES.len()],
                });
                into.processes += t.processes;
                for (i, p) in t.phases.into_iter().enumerate() {
                    if let Some(p) = p {
                        add_tally(&mut into.phases[i], p.count, p.total);
                    }
                }
            }
            for (i, s) in other.phases.into_iter().enumerate() {
                side.phases[i].append(s);
            }
            for (i, p) in other.phase_tallies.into_iter().enumerate() {
                if let Some(p) = p {
                    add_tally(&mut side.phase_tallies[i], p.count, p.total);
                }
            }
        }
        side
    }

    /// Recordings on this side.
    pub fn recordings(&self) -> u64 {
        self.reports.len() as u64
    }

    /// Processes in all its recordings.
    pub fn processes(&self) -> u64 {
        self.reports.iter().map(|r| r.summary.processes).sum()
    }

    /// Whether a group of this side is also on `other`.
    pub fn shares_a_group_with(&self, other: &Side) -> bool {
        self.groups.keys().any(|k| other.groups.contains_key(k))
    }

    /// Each recording's hints, once each (by rule and group), in order of first appearance.
    fn hints(&self) -> Vec<&Hint> {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for h in self.reports.iter().flat_map(|r| &r.hints) {
            let key = (h.rule, hint_group(&h.text));
            if !seen.contains(&key) {
                seen.push(key);
                out.push(h);
            }
        }
        out
    }
}

/// Count, mean and total of a quantity on one side. With several recordings a side, the
/// count and total are per recording (their average) and the mean is over all of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub processes: u64,
    pub mean_ns: u64,
    pub total_ns: u64,
}

fn stats(processes: u64, t: Option<Tally>, recordings: u64) -> Stats {
    let per = |v: u64| (v + recordings / 2) / recordings.max(1);
    Stats {
        processes: per(processes),
        mean_ns: t.map_or(0, |t| t.mean()),
        total_ns: t.map_or(0, |t| per(t.total)),
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
    /// BEFORE's recordings.
    pub before: Vec<String>,
    /// AFTER's recordings.
    pub after: Vec<String>,
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
fn moved(b: Option<&GroupTally>, a: Option<&GroupTally>) -> Option<(&'static str, i64)> {
    let change = |p: Phase| {
        let mean = |r: Option<&GroupTally>| {
            r.and_then(|r| r.phases[p as usize])
                .map_or(0, |t| t.mean() as i64)
        };
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

fn group_rows(before: &Side, after: &Side, noise: f64) -> Vec<Row> {
    let (tb, ta) = (&before.tallies, &after.tallies);
    let mut keys: Vec<&str> = tb.keys().chain(ta.keys()).map(String::as_str).collect();
    keys.sort_unstable();
    keys.dedup();
    let empty = Sample::default();
    let mut rows: Vec<Row> = keys
        .into_iter()
        .map(|k| {
            let (b, a) = (tb.get(k), ta.get(k));
            let sb = b.map(|_| before.groups.get(k).unwrap_or(&empty));
            let sa = a.map(|_| after.groups.get(k).unwrap_or(&empty));
            let (status, ci) = judge(sb, sa, noise, seed_of(k));
            let (ratio, ci_pair) = interval_fields(ci);
            let spawn = |t: &GroupTally, side: &Side| {
                stats(
                    t.processes,
                    t.phases[Phase::SpawnCost as usize],
                    side.recordings(),
                )
            };
            let mv = moved(b, a);
            Row {
                group: k.to_string(),
                status,
                before: b.map(|t| spawn(t, before)),
                after: a.map(|t| spawn(t, after)),
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
            let i = phase as usize;
            let (tb, ta) = (before.phase_tallies[i], after.phase_tallies[i]);
            if tb.is_none() && ta.is_none() {
                return None;
            }
            let xb = tb.map(|_| &before.phases[i]).filter(|x| x.n() > 0);
            let xa = ta.map(|_| &after.phases[i]).filter(|x| x.n() > 0);
            let (status, ci) = judge(xb, xa, noise, seed_of(phase.name()));
            let (ratio, ci) = interval_fields(ci);
            Some(PhaseRow {
                phase,
                status,
                before: tb.map(|t| stats(t.count, Some(t), before.recordings())),
                after: ta.map(|t| stats(t.count, Some(t), after.recordings())),
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

/// Total spawn_cost of the rows (of the grouping the hint's rule looks at) named `group`,
/// per recording of the side.
fn hint_cost(side: &Side, rule: &str, group: Option<&str>) -> u64 {
    let total = |r: &GroupRow| r.phases.get(Phase::SpawnCost).map_or(0, |s| s.total);
    let by = match rule {
        "dynamic_linking" => Some(GroupBy::Binary),
        "pagetable_copy" | "path_search" => Some(GroupBy::Parent),
        _ => None,
    };
    let sum: u64 = side
        .reports
        .iter()
        .map(|report| match by {
            None => report.phases.get(Phase::SpawnCost).map_or(0, |s| s.total),
            Some(by) => report
                .group(by)
                .iter()
                .filter(|r| group.is_none_or(|g| base(&r.binary) == g))
                .map(total)
                .sum(),
        })
        .sum();
    sum / side.recordings().max(1)
}

fn hint_checks(before: &Side, after: &Side) -> Vec<HintCheck> {
    let key = |h: &Hint| (h.rule, hint_group(&h.text));
    let (hb, ha) = (before.hints(), after.hints());
    let in_after: Vec<_> = ha.iter().map(|h| key(h)).collect();
    let in_before: Vec<_> = hb.iter().map(|h| key(h)).collect();
    let check = |h: &Hint, status: &'static str| {
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
    let mut out: Vec<HintCheck> = hb
        .iter()
        .map(|h| {
            let still = in_after.contains(&key(h));
            check(h, if still { "still triggered" } else { "resolved" })
        })
        .collect();
    out.extend(
        ha.iter()
            .filter(|h| !in_before.contains(&key(h)))
            .map(|h| check(h, "new")),
    );
    out
}

/// What a reader should know about how the sides were measured.
fn notes(before: &Side, after: &Side) -> Vec<String> {
    if before.recordings() == 1 && after.recordings() == 1 {
        vec![
            "one recording a side: the intervals cover the spread between processes, not the \
             machine's drift between the two runs (a VM's speed can move by a quarter within \
             seconds). For a verdict that does, record each side 3 or more times, alternating, \
             and compare them all: forkprof diff before-*.db -- after-*.db"
                .to_string(),
        ]
    } else {
        let n = |k: u64| format!("{k} recording{}", if k == 1 { "" } else { "s" });
        vec![format!(
            "{} before and {} after: each interval comes from the spread between the \
             recordings' means; counts and totals are per recording",
            n(before.recordings()),
            after.recordings()
        )]
    }
}

/// Compares two sides grouped `by` (the grouping they were built with); `noise_pct` is the
/// band in % (10 for ±10%).
pub fn compare(before: &Side, after: &Side, by: GroupBy, noise_pct: f64) -> Diff {
    let noise = noise_pct / 100.0;
    Diff {
        before: Vec::new(),
        after: Vec::new(),
        by: by.name(),
        noise: noise_pct,
        notes: notes(before, after),
        rows: group_rows(before, after, noise),
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

    #[test]
    fn hint_groups_are_the_first_quoted_name() {
        assert_eq!(
            hint_group("`cc1` is dynamically linked: `x`").as_deref(),
            Some("cc1")
        );
        assert_eq!(hint_group("atime updates on exec"), None);
    }
}
