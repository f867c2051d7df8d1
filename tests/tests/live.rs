//! `top` in a real terminal (tmux) and `monitor` scraped by a real Prometheus server.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use forkprof_tests::{
    Killed, Tmux, forkprof, free_port, monitor, needs_root, prometheus, query, scrape, sh, tempdir,
    wait_for, wait_until_recording,
};

/// A uniquely named copy of `true` and a shell loop that runs it `n` times.
fn probe(dir: &Path, name: &str, n: u32) -> (PathBuf, String) {
    let bin = dir.join(name);
    std::fs::copy("/bin/true", &bin).unwrap();
    let script = format!("for i in $(seq {n}); do {}; done", bin.display());
    (bin, script)
}

#[test]
fn top_in_a_real_terminal() {
    needs_root!();
    let dir = tempdir();
    let (_, script) = probe(&dir, "fp-top-probe", 100_000);
    let t = Tmux::new("fptop", 200);
    t.keys(&[&format!("{} top", forkprof().display()), "Enter"]);
    wait_for("top's header", forkprof_tests::READY, || {
        t.screen().contains("sort: spawns/s").then_some(())?;
        Some(String::new())
    });
    assert!(t.alternate_screen(), "top draws on the alternate screen");
    let mut load = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let row = wait_for("the probe's row", Duration::from_secs(20), || {
        t.screen()
            .lines()
            .find(|l| l.contains("fp-top-probe"))
            .map(str::to_string)
    });
    // BINARY, SPAWNS/S (> 0), MEAN COST, the phase bar, TOP PARENT (the shell loop).
    let rate: f64 = row
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rate in {row:?}"));
    assert!(rate > 0.0, "{row}");
    assert!(
        row.contains("/usr/bin/dash") || row.contains("sh"),
        "top parent: {row}"
    );
    let header = t.screen();
    let spawn_rate: f64 = header
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("spawns/s: now "))
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .expect("spawn rate in the header");
    assert!(spawn_rate > 0.0, "{header}");
    // Filter, sort, pause, help.
    t.keys(&["/", "fp-top", "Enter"]);
    let filtered = wait_for("the filter", Duration::from_secs(5), || {
        let s = t.screen();
        s.contains("filter: fp-top").then_some(s)
    });
    let rows: Vec<&str> = filtered
        .lines()
        .skip_while(|l| !l.contains("BINARY"))
        .skip(1)
        .take_while(|l| !l.contains("bar:"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(rows.iter().all(|l| l.contains("fp-top")), "{rows:?}");
    t.keys(&["s"]);
    wait_for("sort by mean cost", Duration::from_secs(5), || {
        t.screen()
            .contains("sort: mean cost")
            .then_some(String::new())
    });
    t.keys(&["p"]);
    wait_for("pause", Duration::from_secs(5), || {
        t.screen().contains("[PAUSED]").then_some(String::new())
    });
    t.keys(&["h"]);
    wait_for("help", Duration::from_secs(5), || {
        t.screen().contains("this help").then_some(String::new())
    });
    // Esc closes the help; top goes on (it used to quit).
    t.keys(&["Escape"]);
    wait_for("help closed", Duration::from_secs(5), || {
        let screen = t.screen();
        (!screen.contains("this help") && screen.contains("BINARY")).then_some(String::new())
    });
    assert!(t.alternate_screen(), "top still runs");
    // A narrow terminal keeps the name (it used to go first, at under 30 columns) and the
    // rate, and leaves out the top parent and the phase bar.
    t.keys(&["p"]);
    t.resize(28);
    let narrow = wait_for("the narrow table", Duration::from_secs(10), || {
        let s = t.screen();
        let row = s.lines().find(|l| l.contains("probe"))?.to_string();
        (s.contains("BINARY") && !s.contains("TOP PARENT")).then_some(row)
    });
    let rate: Option<f64> = narrow
        .split_whitespace()
        .last()
        .and_then(|v| v.parse().ok());
    assert!(rate.is_some_and(|r| r > 0.0), "{narrow}");
    // A binary that stopped spawning stays a row, idle at 0.0/s, for a minute (it used to
    // vanish at the next interval, leaving an empty table after a burst).
    load.kill().unwrap();
    load.wait().unwrap();
    wait_for("the probe's row, idle", Duration::from_secs(10), || {
        let s = t.screen();
        let row = s.lines().find(|l| l.contains("probe"))?.to_string();
        (row.split_whitespace().last()? == "0.0").then_some(row)
    });
    t.keys(&["q"]);
    wait_for("the shell back", Duration::from_secs(10), || {
        (!t.alternate_screen()).then_some(String::new())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_without_a_tty_prints_plain_lines() {
    needs_root!();
    let dir = tempdir();
    let (_, script) = probe(&dir, "fp-plain-probe", 100_000);
    let mut load = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let out = Command::new(forkprof())
        .args(["top", "--once", "--interval", "3s", "--top", "50"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    load.kill().unwrap();
    load.wait().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("spawns/s="), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("fp-plain-probe"))
        .unwrap_or_else(|| panic!("no probe line in\n{text}"));
    assert!(line.contains("mean_spawn_cost_ns="), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process counts in the rows of the interval in which it exits, as its spawn counts in
/// the header's: a burst run late in an interval, its processes gone well before the
/// interval ends, is all in the probe row's `total` of the line printed at that interval's
/// end. (A process used to be finished a second after its exit, so a burst in an interval's
/// last second showed in the header one interval before the rows.)
#[test]
fn top_counts_a_burst_in_the_interval_it_ends_in() {
    use std::io::BufRead as _;
    needs_root!();
    let dir = tempdir();
    const N: u32 = 20;
    // A probe of its own for each try, so that a try's row holds only its own burst.
    let probes: Vec<(String, String)> = (0..3)
        .map(|i| {
            let name = format!("fp-burst-{i}");
            let (_, script) = probe(&dir, &name, N);
            (name, script)
        })
        .collect();
    let mut top = Killed(
        Command::new(forkprof())
            .args(["top", "--plain", "--interval", "3s", "--top", "100"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // top's lines, with the time each arrived.
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, String)>();
    let stdout = top.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    // An interval's line and its rows, written at once: the rows are the lines that follow
    // it within a second (the next interval's line is 3 s away).
    let next_block = |rx: &std::sync::mpsc::Receiver<(Instant, String)>| -> (Instant, Vec<String>) {
        let at = loop {
            let (at, line) = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("top printed no line for 30 s");
            if line.starts_with("spawns/s=") {
                break at;
            }
        };
        let mut rows = Vec::new();
        while let Ok((_, line)) = rx.recv_timeout(Duration::from_secs(1)) {
            rows.push(line);
        }
        (at, rows)
    };
    // The first interval starts while the programs attach: wait for the second's line.
    next_block(&rx);
    let (mut tick, _) = next_block(&rx);
    let mut tries = Vec::new();
    for (name, script) in &probes {
        // 2.4 s into a 3-second interval, a burst of N one-millisecond processes: it ends more
        // than 300 ms before the interval's end, and less than the old second.
        std::thread::sleep(
            (tick + Duration::from_millis(2400)).saturating_duration_since(Instant::now()),
        );
        sh(script);
        let ended = Instant::now();
        let (at, rows) = next_block(&rx);
        // The interval's count of the probe (`total=` counts since top started).
        let processes = rows
            .iter()
            .find(|l| l.contains(name.as_str()))
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("processes="))
            })
            .and_then(|v| v.parse::<u32>().ok());
        // A slow burst that ran into the interval's end proves nothing: try again.
        if ended + Duration::from_millis(300) > at {
            tries.push(format!("the burst ended {:?} before the line", at - ended));
            tick = at;
            continue;
        }
        assert_eq!(
            processes,
            Some(N),
            "the burst ended {:?} before the interval's line, whose rows are {rows:#?}",
            at - ended
        );
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    panic!("no burst ended 300 ms before its interval's end: {tries:?}");
}

/// A steady loop, as long as it lives: a uniquely named copy of `sleep`, run for 50 ms at a
/// time, one line appended to a file per run (the time it ended, bash's `$EPOCHREALTIME`),
/// so that its real rate can be counted, over its life or over a window.
struct Paced {
    child: Child,
    count: PathBuf,
}

impl Paced {
    fn start(dir: &Path, name: &str) -> Self {
        let bin = dir.join(name);
        std::fs::copy("/bin/sleep", &bin).unwrap();
        let count = dir.join(format!("{name}.count"));
        let script = format!(
            "while :; do {} 0.05; echo $EPOCHREALTIME >> {}; done",
            bin.display(),
            count.display()
        );
        let child = Command::new("bash").args(["-c", &script]).spawn().unwrap();
        Self { child, count }
    }

    /// Runs of the probe so far.
    fn runs(&self) -> usize {
        std::fs::read_to_string(&self.count).map_or(0, |s| s.lines().count())
    }

    /// Runs of the probe that ended between `from` and `to` (seconds since the epoch).
    fn runs_between(&self, from: f64, to: f64) -> usize {
        std::fs::read_to_string(&self.count)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse::<f64>().ok())
            .filter(|t| (from..to).contains(t))
            .count()
    }
}

/// Now, in seconds since the epoch (the clock of bash's `$EPOCHREALTIME`).
fn epoch_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

impl Drop for Paced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The spawns/s of `row` (BINARY, SPAWNS/S, ...), as the TUI and the plain lines show it.
fn row_rate(row: &str) -> Option<f64> {
    if let Some(v) = row
        .split_whitespace()
        .find_map(|w| w.strip_prefix("spawns/s="))
    {
        return v.parse().ok();
    }
    row.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn top_shows_a_steady_rate_every_second() {
    needs_root!();
    let dir = tempdir();
    let loop_ = Paced::start(&dir, "fp-steady-probe");
    let t = Tmux::new("fpsteady", 200);
    t.keys(&[&format!("{} top", forkprof().display()), "Enter"]);
    wait_for("top's header", forkprof_tests::READY, || {
        t.screen().contains("sort: spawns/s").then_some(())?;
        Some(String::new())
    });
    // Past the grace period and the first full interval.
    std::thread::sleep(Duration::from_secs(3));
    let (start, runs0) = (Instant::now(), loop_.runs());
    let mut samples = Vec::new();
    for i in 1..=10 {
        let at = start + Duration::from_secs(i);
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        let screen = t.screen();
        let now: f64 = screen
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("spawns/s: now "))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no spawn rate in\n{screen}"));
        let row = screen
            .lines()
            .find(|l| l.contains("fp-steady-probe"))
            .and_then(row_rate)
            .unwrap_or(0.0);
        samples.push((now, row));
    }
    let real = (loop_.runs() - runs0) as f64 / start.elapsed().as_secs_f64();
    t.keys(&["q"]);
    assert!(real >= 5.0, "the loop ran at {real:.1}/s");
    // The loop is one spawn per run; other processes only add to the system's rate.
    let header_ok = samples.iter().filter(|s| s.0 >= 0.7 * real).count();
    let row_ok = samples
        .iter()
        .filter(|s| (s.1 - real).abs() <= 0.3 * real)
        .count();
    assert!(
        header_ok >= 8 && row_ok >= 8,
        "loop at {real:.1}/s; (header now, probe row) each second: {samples:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_once_shows_one_full_interval_with_rows() {
    needs_root!();
    let dir = tempdir();
    let loop_ = Paced::start(&dir, "fp-once-probe");
    for (interval, secs) in [("1s", 1.0), ("2s", 2.0)] {
        let mut top = Command::new(forkprof())
            .args(["top", "--once", "--interval", interval, "--top", "100"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The interval ends when its line is written: the runs that ended in the `secs`
        // before are the ones it should count, whatever the loop's pace before or after (a
        // stall of the loop slows both alike).
        let mut text = String::new();
        let mut ended = None;
        for line in std::io::BufRead::lines(std::io::BufReader::new(top.stdout.take().unwrap())) {
            let line = line.unwrap();
            if line.starts_with("spawns/s=") {
                ended.get_or_insert_with(epoch_s);
            }
            text.push_str(&line);
            text.push('\n');
        }
        assert!(top.wait().unwrap().success(), "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("spawns/s=")).count(),
            1,
            "{text}"
        );
        let ended = ended.unwrap();
        let runs = loop_.runs_between(ended - secs, ended) as f64;
        assert!(
            runs >= 5.0 * secs,
            "the loop ran {runs} times in the interval"
        );
        let rate = text
            .lines()
            .find(|l| l.contains("fp-once-probe"))
            .and_then(row_rate)
            .unwrap_or_else(|| panic!("--interval {interval}: no probe row in\n{text}"));
        // A run at each edge may fall on either side (it ends, then its exit is seen a
        // moment later), and the line is read a little after the interval's end: two runs
        // and a tenth. Half an interval, the failure this looks for, is far outside.
        let counted = rate * secs;
        assert!(
            (counted - runs).abs() <= 2.0 + 0.1 * runs,
            "--interval {interval}: probe row at {rate}/s ({counted} runs), the loop ran \
             {runs} times in the interval's {secs} s before its line"
        );
    }
    drop(loop_);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn monitor_is_scraped_by_a_real_prometheus() {
    needs_root!();
    let dir = tempdir();
    let port = free_port();
    // K larger than the binaries a busy host spawns while the test runs: the probe gets its
    // series from its first run, which is what makes its count exact (a binary that
    // enters the top K later counts from then on; what it did before is in `other`).
    let monitor = monitor(port, &["--top-binaries", "1000"]);
    wait_for("/metrics", forkprof_tests::READY, || scrape(port));
    let (_prometheus, prom) = prometheus(&dir, port);
    let before = query(prom, "sum(forkprof_execs_total{result=\"ok\"})").unwrap_or(0.0);
    let (_, script) = probe(&dir, "fp-mon-probe", 50);
    sh(&script);
    // Finished processes reach the metrics at the next update after their exit, then one
    // scrape.
    let spawns = wait_for("the probe's series", Duration::from_secs(30), || {
        query(
            prom,
            "forkprof_binary_spawns_total{binary=~\".*fp-mon-probe\"}",
        )
        .filter(|&v| v >= 50.0)
        .map(|v| v.to_string())
    });
    assert_eq!(spawns, "50", "exactly the 50 runs of the probe");
    let after = query(prom, "sum(forkprof_execs_total{result=\"ok\"})").unwrap();
    assert!(after - before >= 50.0, "execs {before} -> {after}");
    let hist = query(
        prom,
        "sum(forkprof_phase_duration_seconds_count{phase=\"exec\"})",
    )
    .unwrap();
    assert!(hist >= 50.0, "exec histogram count {hist}");
    assert_eq!(
        query(prom, "forkprof_build_info").map(|v| v as u64),
        Some(1)
    );
    // SIGTERM stops the exporter cleanly.
    let mut monitor = monitor;
    // SAFETY: plain syscall.
    unsafe { libc::kill(monitor.0.id() as i32, libc::SIGTERM) };
    let status = monitor.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A malformed address is refused when the command line is parsed (exit 2); one that cannot
/// be bound (busy, or no such host) exits 1; with port 0 the port the kernel chose is the
/// one printed, not 0.
#[test]
fn monitor_on_a_busy_or_bad_address_exits_1() {
    needs_root!();
    for malformed in ["not-an-address", "127.0.0.1:99999", ":9464"] {
        let out = Command::new(forkprof())
            .args(["monitor", "--listen", malformed])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{malformed}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value"));
    }
    let mut any = Command::new(forkprof())
        .args(["monitor", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(any.stderr.take().unwrap()),
        &mut line,
    )
    .unwrap();
    // SAFETY: plain syscall.
    unsafe { libc::kill(any.id() as i32, libc::SIGTERM) };
    assert_eq!(any.wait().unwrap().code(), Some(0));
    let port: u16 = line
        .trim()
        .strip_prefix("forkprof: serving metrics at http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert_ne!(port, 0, "{line}");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    for bad in [addr.as_str(), "256.1.1.1:80", "no-such-host.invalid:80"] {
        let out = Command::new(forkprof())
            .args(["monitor", "--listen", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cannot listen on") && err.contains(bad),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// The voluntary context switches of every thread of process `pid` so far: one per sleep
/// the process woke from.
fn wakeups(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// The wakeups of a running forkprof over 3 s, half a second after it was ready.
fn wakeups_in_3s(pid: u32) -> u64 {
    std::thread::sleep(Duration::from_millis(500));
    let before = wakeups(pid);
    std::thread::sleep(Duration::from_secs(3));
    wakeups(pid) - before
}

/// The live views take what the kernel queued at each update themselves (every 500 ms for
/// `monitor`, every interval for plain `top`), so their agent no longer polls the ring
/// buffer every 100 ms in between: an idle one wakes a few times a second, not 20. Measured
/// on the test VM: `monitor` 10-11 wakeups in 3 s, plain `top` about 7; at the prompt pace
/// both woke about 60 times, as `record`, which keeps it (a SIGKILL loses what is still in
/// the ring buffer), still does. The bound sits between the two paces in ratio, a factor of
/// about 2 from each; `record` is the control that the count sees a 100 ms poll.
#[test]
fn idle_live_views_wake_only_to_update() {
    needs_root!();
    let port = free_port();
    let monitor = monitor(port, &[]);
    wait_for("/metrics", forkprof_tests::READY, || scrape(port));
    let monitor_wakeups = wakeups_in_3s(monitor.0.id());
    drop(monitor);

    let mut top = Command::new(forkprof())
        .args(["top", "--plain"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(top.stdout.take().unwrap()));
    // Its first line: tracing has started. The pipe holds the few lines printed after it.
    assert!(
        lines.next().is_some_and(|l| l.is_ok()),
        "top printed nothing"
    );
    let top = Killed(top);
    let top_wakeups = wakeups_in_3s(top.0.id());
    drop(top);

    let dir = tempdir();
    let mut record = Command::new(forkprof())
        .args(["record", "-o"])
        .arg(dir.join("idle.db"))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_recording(&mut record);
    let record = Killed(record);
    let record_wakeups = wakeups_in_3s(record.0.id());
    drop(record);
    let _ = std::fs::remove_dir_all(&dir);

    eprintln!(
        "wakeups in 3 s: monitor {monitor_wakeups}, top --plain {top_wakeups}, record {record_wakeups}"
    );
    assert!(
        monitor_wakeups < 27,
        "monitor woke {monitor_wakeups} times in 3 s"
    );
    assert!(
        top_wakeups < 27,
        "top --plain woke {top_wakeups} times in 3 s"
    );
    assert!(
        record_wakeups >= 27,
        "record woke {record_wakeups} times in 3 s"
    );
}
