//! `forkprof monitor` speaks both exposition formats, as Prometheus' own exporters do:
//! OpenMetrics when the scraper asks for it, the text format 0.0.4 otherwise, and
//! `promtool check metrics` accepts what it serves (it used to fail on `unknown metric type
//! "info"`, because OpenMetrics was served whatever the scraper asked for).
use std::process::{Command, Stdio};

use forkprof_tests::{curl, free_port, monitor, needs_root, wait_for};

/// The response's Content-Type and body for `url`, asking with `accept`.
fn scrape_as(url: &str, accept: &str) -> Option<(String, String)> {
    let accept = format!("Accept: {accept}");
    let text = curl(&["-H", &accept, "-w", "\n%{content_type}", url])?;
    let (body, kind) = text.rsplit_once('\n')?;
    Some((kind.to_string(), body.to_string()))
}

fn promtool_check(body: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (cargo xtask setup installs the prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn both_exposition_formats_pass_promtool() {
    needs_root!();
    let port = free_port();
    let _monitor = monitor(port, &[]);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let text = wait_for("/metrics", forkprof_tests::READY, || {
        scrape_as(&url, "text/plain;version=0.0.4")
    });
    assert!(
        text.0.starts_with("text/plain; version=0.0.4"),
        "{}",
        text.0
    );
    assert!(!text.1.contains("# EOF"), "{}", text.1);
    let checked = promtool_check(&text.1);
    assert!(
        checked.status.success(),
        "promtool on text 0.0.4: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    // What Prometheus sends: OpenMetrics first.
    let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let om = scrape_as(&url, prometheus_accept).expect("OpenMetrics scrape");
    assert!(om.0.starts_with("application/openmetrics-text"), "{}", om.0);
    assert!(om.1.trim_end().ends_with("# EOF"), "{}", om.1);
    // The same samples either way.
    let samples = |body: &str| {
        body.lines()
            .filter(|l| l.starts_with("forkprof_spawns_total{"))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(samples(&text.1), samples(&om.1));
    assert!(!samples(&text.1).is_empty(), "{}", text.1);
    // The per-cgroup families (their `other` series exists from the start) pass too.
    for family in [
        "forkprof_cgroup_spawns_total{",
        "forkprof_cgroup_spawn_cost_seconds_total{",
    ] {
        assert!(text.1.contains(family), "{family} in {}", text.1);
    }
}
