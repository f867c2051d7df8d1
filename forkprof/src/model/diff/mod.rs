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
mod interval;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

pub use interval::{
    BOOTSTRAP_MAX, Interval, IntervalMethod, LEVEL, MIN_PROCESSES, RESAMPLES, Sample, Status,
    bootstrap, delta, judge, ratio_interval, seed_of,
};

use super::hints::Hint;
use super::phases::{PHASES, Phase};
use super::report::{Added, Context, GroupBy, Report, escape};
use super::trace::{Shared, Trace, file_name};

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
    /// One per recording: its summary, phases, hints and flame graph; of its groups, at
    /// most those its hints read (`Context::group_rows`: the diff's rows come from
    /// `tallies`).
    pub reports: Vec<Report>,
    /// Group key -> spawn_cost of each of its processes.
    groups: HashMap<String, Sample>,
    /// Group key -> its rows' counts and phase totals (groups with processes only).
    tallies: BTreeMap<String, GroupTally>,
    /// Per phase (indexed by `Phase as usize`): its value in each process.
    phases: Vec<Sample>,
    /// Per phase: the reports' counts and totals.
    phase_tallies: Vec<Option<Tally>>,
    /// Spawn cost by the last component of a process's binary, and of its parent's, summed
    /// over the side's recordings: what a hint about a binary or a parent of that name is
    /// measured by on either side.
    base_costs: BaseCosts,
}

/// Spawn cost by name (a path's last component, as the hints name binaries): of the
/// processes' binaries, and of their parents'.
#[derive(Default)]
struct BaseCosts {
    binary: HashMap<String, u64>,
    parent: HashMap<String, u64>,
}

impl BaseCosts {
    fn append(&mut self, other: BaseCosts) {
        for (into, from) in [
            (&mut self.binary, other.binary),
            (&mut self.parent, other.parent),
        ] {
            for (k, v) in from {
                let t = into.entry(k).or_default();
                *t = t.saturating_add(v);
            }
        }
    }
}

/// The groupings of a side's report: `by` first (the side samples the report's first
/// grouping), then binary and parent, which the hints look at, whatever `by` is.
pub fn groupings(by: GroupBy) -> Vec<GroupBy> {
    let mut all = vec![by];
    for g in [GroupBy::Binary, GroupBy::Parent] {
        if !all.contains(&g) {
            all.push(g);
        }
    }
    all
}

/// One recording's side, sampled one process at a time: `add` what the report made of each
/// process (`ReportBuilder::add`, or `Report::build_each`), then `finish` with the report.
/// Memory grows with the groups (and at most `BOOTSTRAP_MAX` values each), not with the
/// processes, so a recording of any size is compared as it is read.
pub struct SideBuilder {
    /// Group key -> its processes and phase totals, and the spawn_cost of each of its
    /// processes.
    groups: HashMap<Shared, (GroupTally, Sample)>,
    /// Per phase (indexed by `Phase as usize`): its value in each process.
    phases: Vec<Sample>,
    /// Spawn cost by the raw last component of the binary, and of the parent's.
    binary_costs: HashMap<Vec<u8>, u64>,
    parent_costs: HashMap<Vec<u8>, u64>,
}

impl Default for SideBuilder {
    fn default() -> Self {
        Self {
            groups: HashMap::new(),
            phases: vec![Sample::default(); PHASES.len()],
            binary_costs: HashMap::new(),
            parent_costs: HashMap::new(),
        }
    }
}

/// Adds `v` to `map[key]`, making the key only when it is new.
fn add_cost(map: &mut HashMap<Vec<u8>, u64>, key: &[u8], v: u64) {
    match map.get_mut(key) {
        Some(t) => *t = t.saturating_add(v),
        None => {
            map.insert(key.to_vec(), v);
        }
    }
}

impl SideBuilder {
    /// Adds one process; the report's first grouping must be the diff's `by`.
    pub fn add(&mut self, added: &Added) {
        let ph = &added.phases;
        for phase in PHASES {
            if let Some(v) = ph.get(phase) {
                self.phases[phase as usize].add(v);
            }
        }
        let Some(group) = &added.group else {
            return;
        };
        let (tally, sample) = match self.groups.get_mut(group) {
            Some(g) => g,
            None => self.groups.entry(group.clone()).or_insert_with(|| {
                let tally = GroupTally {
                    processes: 0,
                    phases: vec![None; PHASES.len()],
                };
                (tally, Sample::default())
            }),
        };
        tally.processes += 1;
        for phase in PHASES {
            if let Some(v) = ph.get(phase) {
                add_tally(&mut tally.phases[phase as usize], 1, v);
            }
        }
        let Some(cost) = ph.get(Phase::SpawnCost) else {
            return;
        };
        add_cost(
            &mut self.binary_costs,
            file_name(&added.binaries.last),
            cost,
        );
        add_cost(
            &mut self.parent_costs,
            file_name(&added.binaries.at_spawn),
            cost,
        );
        sample.add(cost);
    }

    /// The side of the recording whose processes were added, with its report.
    pub fn finish(self, report: Report) -> Side {
        let mut groups = HashMap::new();
        let mut tallies = BTreeMap::new();
        for (k, (tally, sample)) in self.groups {
            let k = escape(&k);
            // Sampled where one of its processes has a spawn cost.
            if sample.n() > 0 {
                groups.insert(k.clone(), sample);
            }
            tallies.insert(k, tally);
        }
        let named = |costs: HashMap<Vec<u8>, u64>| {
            costs
                .into_iter()
                .map(|(k, v)| (escape(&k), v))
                .collect::<HashMap<_, _>>()
        };
        let base_costs = BaseCosts {
            binary: named(self.binary_costs),
            parent: named(self.parent_costs),
        };
        let mut phase_tallies = vec![None; PHASES.len()];
        for phase in PHASES {
            if let Some(s) = report.phases.get(phase) {
                add_tally(&mut phase_tallies[phase as usize], s.count, s.total);
            }
        }
        Side {
            reports: vec![report],
            groups,
            tallies,
            phases: self.phases,
            phase_tallies,
            base_costs,
        }
    }
}

impl Side {
    /// One recording in memory. `ctx.groupings` must start with `by`.
    pub fn build(trace: &Trace, ctx: &Context<'_>) -> Self {
        let mut side = SideBuilder::default();
        let report = Report::build_each(trace, ctx, |added| side.add(added));
        side.finish(report)
    }

    /// Several recordings of one side as one: their values kept apart per recording.
    pub fn merge(sides: Vec<Side>) -> Self {
        let mut it = sides.into_iter();
        let mut side = it.next().expect("a side has a recording");
        for other in it {
            side.reports.extend(other.reports);
            side.base_costs.append(other.base_costs);
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

/// The first `name` quoted in backticks in a hint's text.
fn hint_group(text: &str) -> Option<String> {
    let start = text.find('`')? + 1;
    let len = text[start..].find('`')?;
    Some(text[start..start + len].to_string())
}

/// Total spawn_cost of the rows (of the grouping the hint's rule looks at) named `group`,
/// per recording of the side.
fn hint_cost(side: &Side, rule: &str, group: Option<&str>) -> u64 {
    let costs = match rule {
        "dynamic_linking" | "library_search" => Some(&side.base_costs.binary),
        "pagetable_copy" | "path_search" => Some(&side.base_costs.parent),
        _ => None,
    };
    let sum: u64 = match (costs, group) {
        (Some(costs), Some(g)) => costs.get(g).copied().unwrap_or(0),
        (Some(costs), None) => costs.values().fold(0, |a, &v| a.saturating_add(v)),
        (None, _) => side
            .reports
            .iter()
            .map(|report| report.phases.get(Phase::SpawnCost).map_or(0, |s| s.total))
            .sum(),
    };
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

    #[test]
    fn hint_groups_are_the_first_quoted_name() {
        assert_eq!(
            hint_group("`cc1` is dynamically linked: `x`").as_deref(),
            Some("cc1")
        );
        assert_eq!(hint_group("atime updates on exec"), None);
    }
}
