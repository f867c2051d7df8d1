//! `forkprof bench`'s arithmetic: per-iteration phase means, the classic ratios, and which
//! phase explains each ratio. Pure, so the explanations are unit-tested.
use std::collections::BTreeMap;

use serde::Serialize;

/// Phases that can explain a difference between two rows: they do not overlap in time.
/// (`vfork_wait` spans the child's exec or exit, and `pagetable_copy` is part of `fork`.)
pub const EXPLAINING: [&str; 7] = [
    "fork",
    "exec",
    "exec_failed",
    "ld_start",
    "ld_map",
    "ld_reloc_init",
    "exit_teardown",
];

#[derive(Clone, Debug, Default, Serialize)]
pub struct RowResult {
    pub name: String,
    pub iterations: u64,
    /// Wall time per iteration without tracing (µs).
    pub us_per_iter: f64,
    /// Wall time per iteration while traced (µs).
    pub us_per_iter_traced: f64,
    /// Mean per iteration of each phase over the spawned processes (µs; cow_faults: count).
    pub phases_us: BTreeMap<String, f64>,
    /// Mean spawn_cost per iteration / traced wall time per iteration.
    pub spawn_cost_coverage: f64,
    /// Traced / bare - 1.
    pub tracing_overhead: f64,
    /// Parent RSS for the sweep rows (MiB).
    pub rss_mib: u64,
}

impl RowResult {
    pub fn phase(&self, name: &str) -> f64 {
        self.phases_us.get(name).copied().unwrap_or(0.0)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub name: String,
    pub value: f64,
    /// The phase whose change explains most of the difference, and its share of it.
    pub phase: Option<String>,
    pub share: f64,
    pub text: String,
}

/// Rows whose traced runs differ by less than this are not explained: single runs vary by
/// about that much on a noisy machine.
pub const NOISE: f64 = 0.08;

/// The phase whose change between `a` and `b` goes most in the direction of the wall-time
/// difference, with its share of that difference. Phases come from the traced runs, so the
/// difference they are compared with is that of the traced runs too.
pub fn explain(a: &RowResult, b: &RowResult) -> Option<(&'static str, f64)> {
    let total = a.us_per_iter_traced - b.us_per_iter_traced;
    if total.abs() < f64::EPSILON {
        return None;
    }
    EXPLAINING
        .iter()
        .map(|&p| (p, a.phase(p) - b.phase(p)))
        .filter(|(_, d)| d.signum() == total.signum())
        .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
        .map(|(p, d)| (p, d / total))
}

fn ratio(name: &str, a: &RowResult, b: &RowResult) -> Ratio {
    let value = a.us_per_iter / b.us_per_iter;
    let explained = explain(a, b);
    let total = a.us_per_iter_traced - b.us_per_iter_traced;
    let relative = total.abs() / b.us_per_iter_traced.max(f64::EPSILON);
    let mut text = match explained {
        _ if relative < NOISE => {
            return Ratio {
                name: name.into(),
                value,
                phase: None,
                share: 0.0,
                text: format!(
                    "{name}: {value:.2}× ({:.0} vs {:.0} µs per iteration); the traced runs differ by {:.0}%, within this machine's run-to-run noise",
                    a.us_per_iter,
                    b.us_per_iter,
                    100.0 * relative
                ),
            };
        }
        Some((phase, share)) if share > 1.2 => format!(
            "{name}: {value:.2}× ({:.0} vs {:.0} µs per iteration); {phase} changed by {:.0} µs, more than the whole difference (other parts moved the other way)",
            a.us_per_iter,
            b.us_per_iter,
            a.phase(phase) - b.phase(phase)
        ),
        Some((phase, share)) => format!(
            "{name}: {value:.2}× ({:.0} vs {:.0} µs per iteration); {phase} explains {:.0}% of the difference",
            a.us_per_iter,
            b.us_per_iter,
            100.0 * share
        ),
        None => format!(
            "{name}: {value:.2}× ({:.0} vs {:.0} µs per iteration)",
            a.us_per_iter, b.us_per_iter
        ),
    };
    let measured: f64 = EXPLAINING.iter().map(|p| a.phase(p) - b.phase(p)).sum();
    let total = a.us_per_iter_traced - b.us_per_iter_traced;
    if total.abs() > f64::EPSILON && measured / total < 0.5 {
        text.push_str(&format!(
            "; {:.0}% of it is outside the measured phases (user-space start-up before main, the child's own work)",
            100.0 * (1.0 - measured / total)
        ));
    }
    Ratio {
        name: name.into(),
        value,
        phase: explained.map(|(p, _)| p.to_string()),
        share: explained.map_or(0.0, |(_, s)| s),
        text,
    }
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
pub const RATIOS: [(&str, &str, &str); 7] = [
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
];

/// The classic ratios over whichever rows ran (by name). `paired` holds, by ratio name, the
/// median of a/b over runs of the two rows taken in turn (a b a b ...): on a machine whose
/// speed drifts, that is far steadier than the ratio of two rows measured minutes apart.
pub fn ratios(rows: &[RowResult], paired: &BTreeMap<String, f64>) -> Vec<Ratio> {
    let get = |n: &str| rows.iter().find(|r| r.name == n);
    let mut out = Vec::new();
    for (name, a, b) in RATIOS {
        if let (Some(a), Some(b)) = (get(a), get(b)) {
            let mut r = ratio(name, a, b);
            if let Some(&v) = paired.get(name) {
                let table = r.value;
                r.value = v;
                r.text = r.text.replacen(
                    &format!("{table:.2}×"),
                    &format!("{v:.2}× (paired runs)"),
                    1,
                );
            }
            out.push(r);
        }
    }
    let sweep: Vec<&RowResult> = rows
        .iter()
        .filter(|r| r.name.starts_with("fork rss "))
        .collect();
    let points: Vec<(f64, f64)> = sweep
        .iter()
        .map(|r| (r.rss_mib as f64 / 1024.0, r.us_per_iter))
        .collect();
    if let Some(slope) = slope_per_gib(&points) {
        let biggest = sweep.iter().max_by_key(|r| r.rss_mib);
        let pt = biggest.map_or(0.0, |r| {
            let fork = r.phase("fork");
            if fork > 0.0 {
                r.phase("pagetable_copy") / fork
            } else {
                0.0
            }
        });
        let text = match biggest {
            Some(r) => format!(
                "fork slope: {slope:.0} µs per GiB of parent RSS; at {} MiB, {:.0}% of the fork syscall is pagetable_copy",
                r.rss_mib,
                100.0 * pt
            ),
            None => format!("fork slope: {slope:.0} µs per GiB of parent RSS"),
        };
        out.push(Ratio {
            name: "fork slope per GiB of RSS".into(),
            value: slope,
            phase: Some("pagetable_copy".into()),
            share: pt,
            text,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, us: f64, phases: &[(&str, f64)]) -> RowResult {
        RowResult {
            name: name.into(),
            us_per_iter: us,
            us_per_iter_traced: us,
            phases_us: phases.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
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
        assert_eq!(phase, "ld_start");
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
        assert_eq!(explain(&vfork, &fork).unwrap().0, "fork");
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
    }
}
