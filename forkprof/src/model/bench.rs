//! `forkprof bench`'s arithmetic: per-iteration phase means, the classic ratios, and which
//! phase explains each ratio. Pure, so the explanations are unit-tested.
use std::collections::BTreeMap;

use serde::Serialize;

use super::phases::{Phase, PhaseMap};

/// Phases that can explain a difference between two rows: they do not overlap in time when
/// the workloads run on one CPU. (`vfork_wait` spans the child's run and its exec or exit,
/// and `pagetable_copy` is part of `fork`.)
/// `ld_start` and `static_start` are one stage, the C library's start-up before anything is
/// loaded (CPU feature probes, tunables), in a dynamic and in a static binary: a
/// dynamic/static ratio compares them with each other.
pub const EXPLAINING: [Phase; 8] = Phase::EXPLAINING;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RowResult {
    pub name: String,
    pub iterations: u64,
    /// Wall time per iteration without tracing (µs): the mean of the untraced copy, which
    /// took turns with the traced one.
    pub us_per_iter: f64,
    /// Wall time per iteration while traced (µs).
    pub us_per_iter_traced: f64,
    /// Mean per iteration of each phase over the spawned processes (µs; cow_faults: count).
    pub phases_us: PhaseMap<f64>,
    /// Mean spawn_cost per iteration / traced wall time per iteration.
    pub spawn_cost_coverage: f64,
    /// Traced / bare - 1.
    pub tracing_overhead: f64,
    /// Parent RSS for the sweep rows (MiB).
    pub rss_mib: u64,
}

impl RowResult {
    pub fn phase(&self, phase: Phase) -> f64 {
        self.phases_us.get(phase).copied().unwrap_or(0.0)
    }

    /// An `EXPLAINING` part: `ld_start` includes `static_start`.
    fn part(&self, phase: Phase) -> f64 {
        match phase {
            Phase::LdStart => self.phase(Phase::LdStart) + self.phase(Phase::StaticStart),
            _ => self.phase(phase),
        }
    }
}

/// How an `EXPLAINING` part is named when `a` and `b` are compared.
fn part_name(part: Phase, a: &RowResult, b: &RowResult) -> String {
    let statics = [a, b].map(|r| r.phase(Phase::StaticStart) > 0.0);
    let (ld, st) = (Phase::LdStart.name(), Phase::StaticStart.name());
    match (part, statics) {
        (Phase::LdStart, [true, false]) => format!("{st} vs {ld}"),
        (Phase::LdStart, [false, true]) => format!("{ld} vs {st}"),
        (Phase::LdStart, [true, true]) => st.to_string(),
        _ => part.name().to_string(),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub name: String,
    pub value: f64,
    /// The two sides' µs per iteration that give `value` (for the slope: the big parent's
    /// and the empty parent's).
    pub a_us: f64,
    pub b_us: f64,
    /// "turns": the two sides ran as two drivers taking turns iteration by iteration, and
    /// a_us, b_us are the medians of their iterations. "rows": the bare rows' means.
    pub measured: &'static str,
    /// The phase whose change explains most of the difference, and its share of it.
    pub phase: Option<String>,
    pub share: f64,
    pub text: String,
}

/// Two rows run as two drivers taking turns, iteration by iteration: the medians of their
/// iterations' times (µs). A machine whose speed drifts slows both alike, so their ratio is
/// far steadier than that of two rows measured minutes apart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Turns {
    pub a_us: f64,
    pub b_us: f64,
    /// Turn-taking runs whose medians a_us and b_us are (the fork slope takes several).
    pub samples: usize,
    /// The same two drivers taking turns while traced: each side's phase means and traced
    /// wall time, so that the phases that explain the ratio are measured side by side too.
    pub traced: Option<(RowResult, RowResult)>,
}

/// Rows whose traced runs differ by less than this are not explained: separate runs vary by
/// about that much on a noisy machine.
pub const NOISE: f64 = 0.08;
/// The same for two sides traced while taking turns, which drift together.
pub const NOISE_TURNS: f64 = 0.02;

/// The phase whose change between `a` and `b` goes most in the direction of the wall-time
/// difference, with its share of that difference. Phases come from the traced runs, so the
/// difference they are compared with is that of the traced runs too.
pub fn explain(a: &RowResult, b: &RowResult) -> Option<(Phase, f64)> {
    let total = a.us_per_iter_traced - b.us_per_iter_traced;
    if total.abs() < f64::EPSILON {
        return None;
    }
    EXPLAINING
        .iter()
        .map(|&p| (p, a.part(p) - b.part(p)))
        .filter(|(_, d)| d.signum() == total.signum())
        .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
        .map(|(p, d)| (p, d / total))
}

fn ratio(name: &str, a: &RowResult, b: &RowResult, turns: Option<&Turns>) -> Ratio {
    let (a_us, b_us, measured, how) = match turns {
        Some(t) => (t.a_us, t.b_us, "turns", "taking turns"),
        None => (a.us_per_iter, b.us_per_iter, "rows", "separate rows"),
    };
    // The phases come from the traced turns when there are some, else from the rows.
    let (a, b, noise, noise_text) = match turns.and_then(|t| t.traced.as_ref()) {
        Some((ta, tb)) => (ta, tb, NOISE_TURNS, "the noise of taking turns"),
        None => (a, b, NOISE, "this machine's run-to-run noise"),
    };
    let value = a_us / b_us;
    let head = format!("{name}: {value:.2}× ({a_us:.0} vs {b_us:.0} µs per iteration, {how})");
    let explained = explain(a, b);
    let total = a.us_per_iter_traced - b.us_per_iter_traced;
    let relative = total.abs() / b.us_per_iter_traced.max(f64::EPSILON);
    let mut out = Ratio {
        name: name.into(),
        value,
        a_us,
        b_us,
        measured,
        phase: None,
        share: 0.0,
        text: String::new(),
    };
    if relative < noise {
        out.text = format!(
            "{head}; the traced runs differ by {:.0}%, within {noise_text}",
            100.0 * relative
        );
        return out;
    }
    // The child's run after fork includes its copy-on-write faults: say how many.
    let (cow_a, cow_b) = (a.phase(Phase::CowFaults), b.phase(Phase::CowFaults));
    let cow = match explained {
        Some((Phase::ChildRun, _)) if (cow_a - cow_b).abs() >= 0.5 => {
            format!(" (with {cow_a:.1} vs {cow_b:.1} copy-on-write faults)")
        }
        _ => String::new(),
    };
    let named = explained.map(|(p, share)| (part_name(p, a, b), share));
    out.text = match &named {
        Some((phase, share)) if *share > 1.2 => format!(
            "{head}; {phase} changed by {:.0} µs, more than the whole difference (other parts moved the other way)",
            share * total
        ),
        Some((phase, share)) => format!(
            "{head}; {phase}{cow} explains {:.0}% of the difference",
            100.0 * share
        ),
        None => head,
    };
    let measured_sum: f64 = EXPLAINING.iter().map(|&p| a.part(p) - b.part(p)).sum();
    if measured_sum / total < 0.5 {
        out.text.push_str(&format!(
            "; {:.0}% of it is outside the measured phases (switches between parent and child, the parent's wait)",
            100.0 * (1.0 - measured_sum / total)
        ));
    }
    out.share = named.as_ref().map_or(0.0, |(_, s)| *s);
    out.phase = named.map(|(p, _)| p);
    out
}

/// Least-squares slope of µs per iteration against GiB of parent RSS.
pub fn slope_per_gib(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The classic ratios: (name, row a, row b), the ratio being a / b.
pub const RATIOS: [(&str, &str, &str); 8] = [
    (
        "vfork/fork, static parent",
        "vfork+_exit static parent",
        "fork+_exit static parent",
    ),
    (
        "vfork/fork, dynamic parent",
        "vfork+_exit dynamic parent",
        "fork+_exit dynamic parent",
    ),
    (
        "dynamic/static parent, fork+_exit",
        "fork+_exit dynamic parent",
        "fork+_exit static parent",
    ),
    (
        "dynamic/static, fork+exec",
        "fork+exec dynamic",
        "fork+exec static",
    ),
    (
        "many-libs/static, fork+exec",
        "fork+exec many-libs",
        "fork+exec static",
    ),
    (
        "posix_spawn/fork, exec dynamic",
        "posix_spawn dynamic",
        "fork+exec dynamic",
    ),
    (
        "vfork/fork, exec dynamic",
        "vfork+exec dynamic",
        "fork+exec dynamic",
    ),
    (
        "huge/small pages, fork of 256 MiB",
        HUGE_PAGES_ROW,
        "fork rss 256 MiB",
    ),
];

/// The fork of a parent with 256 MiB written in transparent huge pages: one page-table entry
/// to copy per 2 MiB instead of 512.
pub const HUGE_PAGES_ROW: &str = "fork 256 MiB huge pages";

/// The name of the RSS-sweep entry in `ratios` (and in the `turns` map given to it).
pub const SLOPE: &str = "fork slope per GiB of RSS";
/// The sweep's rows are named "fork rss N MiB"; the empty parent is the slope's baseline.
pub const SWEEP_PREFIX: &str = "fork rss ";
pub const SWEEP_BASELINE: &str = "fork rss 0 MiB";

/// The biggest parent of the RSS sweep among the rows that ran (not the baseline).
fn sweep_biggest(rows: &[RowResult]) -> Option<&RowResult> {
    rows.iter()
        .filter(|r| r.name.starts_with(SWEEP_PREFIX) && r.rss_mib > 0)
        .max_by_key(|r| r.rss_mib)
}

/// The classic ratios over whichever rows ran (by name). `turns` holds, by ratio name, the
/// two sides measured taking turns; a ratio without it falls back to the bare rows' means.
/// For `SLOPE`, `turns` holds the biggest sweep parent against the empty one.
pub fn ratios(rows: &[RowResult], turns: &BTreeMap<String, Turns>) -> Vec<Ratio> {
    let get = |n: &str| rows.iter().find(|r| r.name == n);
    let mut out = Vec::new();
    for (name, a, b) in RATIOS {
        if let (Some(a), Some(b)) = (get(a), get(b)) {
            out.push(ratio(name, a, b, turns.get(name)));
        }
    }
    if let Some(r) = slope(rows, turns.get(SLOPE)) {
        out.push(r);
    }
    out
}

/// µs of fork+_exit per GiB of parent RSS: from the biggest parent and the empty one taking
/// turns, or else the least-squares slope over the sweep's rows.
fn slope(rows: &[RowResult], turns: Option<&Turns>) -> Option<Ratio> {
    let biggest = sweep_biggest(rows)?;
    let gib = biggest.rss_mib as f64 / 1024.0;
    let (value, a_us, b_us, measured, how) = match turns {
        Some(t) => (
            (t.a_us - t.b_us) / gib,
            t.a_us,
            t.b_us,
            "turns",
            format!(
                "the {} MiB parent against an empty one, taking turns{}: {:.0} vs {:.0} µs",
                biggest.rss_mib,
                if t.samples > 1 {
                    format!(" in {} samples spread through the run", t.samples)
                } else {
                    String::new()
                },
                t.a_us,
                t.b_us
            ),
        ),
        None => {
            let points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.name.starts_with(SWEEP_PREFIX))
                .map(|r| (r.rss_mib as f64 / 1024.0, r.us_per_iter))
                .collect();
            let base = rows.iter().find(|r| r.name == SWEEP_BASELINE);
            (
                slope_per_gib(&points)?,
                biggest.us_per_iter,
                base.map_or(0.0, |r| r.us_per_iter),
                "rows",
                format!("least squares over {} rows", points.len()),
            )
        }
    };
    let fork = biggest.phase(Phase::Fork);
    let share = if fork > 0.0 {
        biggest.phase(Phase::PagetableCopy) / fork
    } else {
        0.0
    };
    Some(Ratio {
        name: SLOPE.into(),
        value,
        a_us,
        b_us,
        measured,
        phase: Some(Phase::PagetableCopy.name().into()),
        share,
        text: format!(
            "fork slope: {value:.0} µs per GiB of parent RSS ({how}); at {} MiB, {:.0}% of the fork syscall is pagetable_copy",
            biggest.rss_mib,
            100.0 * share
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, us: f64, phases: &[(&str, f64)]) -> RowResult {
        RowResult {
            name: name.into(),
            us_per_iter: us,
            us_per_iter_traced: us,
            phases_us: phases
                .iter()
                .map(|(k, v)| (Phase::from_name(k).unwrap(), *v))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn explains_with_the_phase_that_moved_most_the_same_way() {
        let dynamic = row(
            "fork+exec dynamic",
            1000.0,
            &[
                ("fork", 50.0),
                ("exec", 150.0),
                ("ld_start", 600.0),
                ("ld_map", 100.0),
            ],
        );
        let stat = row(
            "fork+exec static",
            300.0,
            &[("fork", 45.0), ("exec", 140.0)],
        );
        let (phase, share) = explain(&dynamic, &stat).unwrap();
        assert_eq!(phase.name(), "ld_start");
        assert!((share - 600.0 / 700.0).abs() < 1e-9);
        // A faster row: the phase that shrank most explains it.
        let vfork = row(
            "vfork+_exit static parent",
            100.0,
            &[
                ("fork", 20.0),
                ("vfork_wait", 30.0),
                ("exit_teardown", 10.0),
            ],
        );
        let fork = row(
            "fork+_exit static parent",
            300.0,
            &[("fork", 150.0), ("exit_teardown", 60.0)],
        );
        assert_eq!(explain(&vfork, &fork).unwrap().0.name(), "fork");
        let r = ratios(&[vfork, fork, dynamic, stat], &BTreeMap::new());
        assert_eq!(r.len(), 2);
        assert!(
            r[0].text.starts_with("vfork/fork, static parent: 0.33×"),
            "{}",
            r[0].text
        );
        assert!(r[1].text.contains("ld_start explains 86%"), "{}", r[1].text);
    }

    #[test]
    fn small_differences_are_called_noise() {
        let a = row("fork+exec dynamic", 1040.0, &[("ld_start", 700.0)]);
        let b = row("fork+exec static", 1000.0, &[]);
        let r = ratios(&[a, b], &BTreeMap::new());
        assert!(
            r[0].text.contains("within this machine's run-to-run noise"),
            "{}",
            r[0].text
        );
        assert_eq!(r[0].phase, None);
    }

    #[test]
    fn slope_of_the_rss_sweep() {
        assert_eq!(slope_per_gib(&[(0.0, 100.0)]), None);
        let s = slope_per_gib(&[(0.0, 100.0), (0.25, 6100.0), (1.0, 24100.0)]).unwrap();
        assert!((s - 24000.0).abs() < 1e-6);
        let sweep = |mib: u64, us: f64, phases: &[(&str, f64)]| RowResult {
            rss_mib: mib,
            ..row(&format!("fork rss {mib} MiB"), us, phases)
        };
        let rows = [
            sweep(0, 100.0, &[("fork", 40.0)]),
            sweep(256, 6100.0, &[("fork", 2000.0)]),
            sweep(
                1024,
                24100.0,
                &[("fork", 8000.0), ("pagetable_copy", 7920.0)],
            ),
        ];
        // From the rows alone: least squares.
        let r = ratios(&rows, &BTreeMap::new());
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].name.as_str(), r[0].measured), (SLOPE, "rows"));
        assert!((r[0].value - 24000.0).abs() < 1e-6);
        // Taking turns: the biggest parent against the empty one, whatever the rows said.
        let turns = BTreeMap::from([(
            SLOPE.to_string(),
            Turns {
                a_us: 30150.0,
                b_us: 150.0,
                samples: 9,
                traced: None,
            },
        )]);
        let r = ratios(&rows, &turns);
        assert_eq!(r[0].measured, "turns");
        assert!((r[0].value - 30000.0).abs() < 1e-6);
        assert!(
            r[0].text
                .contains("1024 MiB, 99% of the fork syscall is pagetable_copy"),
            "{}",
            r[0].text
        );
    }

    #[test]
    fn static_start_is_compared_with_ld_start() {
        let dynamic = row(
            "fork+exec dynamic",
            1000.0,
            &[
                ("exec", 150.0),
                ("ld_start", 600.0),
                ("ld_map", 50.0),
                ("ld_reloc_init", 100.0),
            ],
        );
        let stat = row(
            "fork+exec static",
            850.0,
            &[("exec", 130.0), ("static_start", 620.0), ("ld_start", 0.0)],
        );
        let (phase, share) = explain(&dynamic, &stat).unwrap();
        assert_eq!(phase.name(), "ld_reloc_init");
        assert!((share - 100.0 / 150.0).abs() < 1e-9);
        // Were the two start-ups not the same stage, ld_start would "explain" 400%.
        let traced = Turns {
            a_us: 950.0,
            b_us: 800.0,
            samples: 1,
            traced: Some((dynamic.clone(), stat.clone())),
        };
        let fast_static = row("fork+exec static", 300.0, &[("static_start", 100.0)]);
        let turns = BTreeMap::from([("dynamic/static, fork+exec".to_string(), traced)]);
        let r = ratios(&[dynamic, fast_static], &turns);
        assert!(
            r[0].text.contains("ld_reloc_init explains 67%"),
            "the traced turns, not the rows, explain: {}",
            r[0].text
        );
    }

    #[test]
    fn a_ratio_taken_in_turns_replaces_the_rows() {
        let a = row("vfork+_exit static parent", 50.0, &[("fork", 10.0)]);
        let b = row("fork+_exit static parent", 150.0, &[("fork", 60.0)]);
        let turns = BTreeMap::from([(
            "vfork/fork, static parent".to_string(),
            Turns {
                a_us: 40.0,
                b_us: 100.0,
                samples: 1,
                traced: None,
            },
        )]);
        let r = ratios(&[a, b], &turns);
        assert_eq!(r[0].value, 0.4);
        assert_eq!(
            (r[0].a_us, r[0].b_us, r[0].measured),
            (40.0, 100.0, "turns")
        );
        assert!(
            r[0].text.starts_with(
                "vfork/fork, static parent: 0.40× (40 vs 100 µs per iteration, taking turns); fork explains 50%"
            ),
            "{}",
            r[0].text
        );
    }
}
