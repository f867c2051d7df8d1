//! Cgroups in the live views, on real cgroup v2 groups made by the test: two workloads spawn
//! 40 and 60 children, each in its own group, while a third spawns 20 outside them.
//! - `monitor`'s `cgroup` label, scraped by a real Prometheus, counts each group exactly;
//! - `top --plain --by cgroup` does too, and shows a group removed before its processes
//!   were finished as its path with " (gone)" (or `cgroup ID` if it was never named), never
//!   as another group;
//! - the TUI shows both groups and their totals, cuts a long path from the left, and `g`
//!   switches between cgroups, units and binaries;
//! - `monitor --cgroup` attaches sys_enter and sys_exit for a 32-bit process in its group
//!   (where the classic syscall events are used), and detaches them once none is left.
//!
//! Each workload is one process in its group plus its children: the `sh` that moves itself
//! into the group and execs the workload (a process counts where it exec'd last) spawns 40
//! (or 60) children that exec /bin/true there: 41 and 61.
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use forkprof_tests::{
    Groups, Killed, Tmux, attached_tracepoints, forkprof, free_port, monitor, needs_root,
    prometheus, query, scrape, shown_cgroup, tempdir, wait_for, workload,
};

/// The three workloads: `fp-workload spawn fork N /bin/true`, 40 in `a`, 60 in `b` (each by
/// an `sh` that moves itself there and execs it), 20 outside; returns when all are done.
fn run_workloads(a: &Path, b: &Path) {
    let w = workload();
    let w = w.display();
    let in_group = |group: &Path, n: u32| {
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec {w} spawn fork {n} /bin/true",
                group.display()
            ))
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut children = vec![
        in_group(a, 40),
        in_group(b, 60),
        Command::new(workload())
            .args(["spawn", "fork", "20", "/bin/true"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    ];
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
}

#[test]
fn monitor_counts_each_cgroup_exactly_as_prometheus_scrapes_it() {
    needs_root!();
    let dir = tempdir();
    let port = free_port();
    // K is larger than the cgroups any host spawns in at once: the groups get their own
    // series from their first process, which is what makes their counts exact (a group
    // that enters the top K later counts from then on; what it did before is in `other`).
    let _monitor = monitor(port, &["--top-cgroups", "1000"]);
    // /metrics answers once the programs are attached.
    wait_for("/metrics", forkprof_tests::READY, || scrape(port));
    let (_prometheus, prom) = prometheus(&dir, port);
    // Made after forkprof started: their names come from a walk of the hierarchy on a
    // miss, not from the one at start.
    let mut groups = Groups::new("monitor");
    let a = groups.make("a.service");
    let b = groups.make("b.service");
    run_workloads(&a, &b);
    let series = |dir: &Path, unit: &str| {
        format!(
            "forkprof_cgroup_spawns_total{{cgroup=\"{}\",unit=\"{unit}\"}}",
            shown_cgroup(dir)
        )
    };
    let (qa, qb) = (series(&a, "a.service"), series(&b, "b.service"));
    // Processes are finished at the exporter's next update after their exit (a second
    // later where a spawn record is late), then scraped.
    for (q, want) in [(&qa, 41.0), (&qb, 61.0)] {
        let got = wait_for(q, Duration::from_secs(30), || {
            query(prom, q).filter(|&v| v >= want)
        });
        assert_eq!(got, want, "{q}");
    }
    // And no more arrive: two more updates (500 ms each) and scrapes.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(query(prom, &qa), Some(41.0), "{qa}");
    assert_eq!(query(prom, &qb), Some(61.0), "{qb}");
    let cost = qa.replace("spawns_total", "spawn_cost_seconds_total");
    let cost = query(prom, &cost).unwrap_or_else(|| panic!("no {cost}"));
    assert!(cost > 0.0, "{cost}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `monitor --cgroup` with the classic syscall events (fentry refused by the test switch, so
/// that every host takes this path): sys_enter and sys_exit attach once a 32-bit process in
/// the group is seen, stay while it lives (two seconds of wait32 exec'ing itself, spawning
/// nothing, ten lingers), and are detached again once none has been left for their linger
/// (200 ms here, `FORKPROF_TEST_IA32_LINGER_MS`; 10 s by default). An idle `monitor` ends
/// each wait at its next update (500 ms), before its poll (1 s) would: the hooks are tended
/// there too, or they would never be detached.
#[test]
fn monitor_attaches_and_detaches_the_ia32_hooks_for_a_32_bit_process() {
    needs_root!();
    let dir = tempdir();
    let (spawn32, wait32) = (dir.join("spawn32"), dir.join("wait32"));
    forkprof_tests::build_spawn32(&spawn32).unwrap();
    forkprof_tests::build_wait32(&wait32).unwrap();
    let mut groups = Groups::new("ia32mon");
    let group = groups.make("spawner");
    let port = free_port();
    let mon = Killed(
        Command::new(forkprof())
            .args([
                "monitor",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--cgroup",
            ])
            .arg(groups.shown("spawner"))
            .env("FORKPROF_TEST_NO_FENTRY", "1")
            .env("FORKPROF_TEST_IA32_LINGER_MS", "200")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("/metrics", forkprof_tests::READY, || scrape(port));
    let pid = mon.0.id();
    let attached = || {
        let tps = attached_tracepoints(pid);
        ["sys_enter", "sys_exit"].map(|t| tps.iter().any(|a| a == t))
    };
    // The group's hooks attach once it has a process (during the first sleep); then wait32,
    // 32-bit, sleeps a second, execs itself, sleeps another and execs the spawner.
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && sleep 1 && {w} {w} {}; :",
            group.display(),
            spawn32.display(),
            w = wait32.display(),
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(attached(), [false; 2], "before any 32-bit process");
    wait_for(
        "sys_enter and sys_exit attached",
        Duration::from_secs(10),
        || (attached() == [true; 2]).then_some(()),
    );
    // No detach while a 32-bit process of the group lives (wait32, then the spawner it
    // execs): each look at the hooks follows a look at the group's processes, and a detach
    // comes at least the linger after the last of them has gone. The hooks attach within an
    // update (500 ms) of wait32's first exec and its two seconds leave about 1.5 s of looks;
    // a host slow enough to leave fewer than three says so.
    let live32 = || {
        std::fs::read_to_string(group.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .any(|p| {
                std::fs::read_link(format!("/proc/{p}/exe"))
                    .is_ok_and(|exe| exe == wait32 || exe == spawn32)
            })
    };
    let since = Instant::now();
    let mut looks = 0;
    while live32() {
        assert_eq!(
            attached(),
            [true; 2],
            "while a 32-bit process lives, after {:?}",
            since.elapsed()
        );
        looks += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        looks >= 3,
        "the 32-bit processes were gone {:?} after the hooks attached ({looks} looks)",
        since.elapsed()
    );
    assert!(shell.wait().unwrap().success());
    wait_for(
        "sys_enter and sys_exit detached",
        Duration::from_secs(10),
        || (attached() == [false; 2]).then_some(()),
    );
    drop(mon);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `top --plain --by cgroup`'s rows, summed over its intervals: name -> processes, and the
/// last `total=` of each name.
fn plain_counts(text: &str) -> (HashMap<String, u64>, HashMap<String, u64>) {
    let (mut sums, mut totals) = (HashMap::new(), HashMap::new());
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("  cgroup=") else {
            continue;
        };
        let (name, rest) = rest.split_once(" processes=").expect(line);
        let mut words = rest.split_whitespace();
        let n: u64 = words.next().unwrap().parse().unwrap();
        let total: u64 = words
            .next()
            .and_then(|w| w.strip_prefix("total="))
            .expect(line)
            .parse()
            .unwrap();
        *sums.entry(name.to_string()).or_default() += n;
        totals.insert(name.to_string(), total);
    }
    (sums, totals)
}

#[test]
fn top_plain_by_cgroup_counts_each_group_and_marks_a_removed_one() {
    needs_root!();
    let mut top = Command::new(forkprof())
        .args(["top", "--plain", "--by", "cgroup", "--interval", "1s"])
        .args(["--top", "100000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = top.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let top = Killed(top);
    let mut text = String::new();
    // The first line comes after the first interval: tracing is on.
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("top's first line");
    assert!(first.starts_with("spawns/s="), "{first}");
    let mut groups = Groups::new("topplain");
    let a = groups.make("a.service");
    let b = groups.make("b.service");
    let c = groups.make("c.service");
    let c_id = std::fs::metadata(&c).unwrap().ino();
    run_workloads(&a, &b);
    // A third group whose processes have all exited, removed before they are finished.
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} spawn fork 10 /bin/true",
            c.display(),
            workload().display()
        ))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::remove_dir(&c).unwrap();
    let (sa, sb, sc) = (shown_cgroup(&a), shown_cgroup(&b), shown_cgroup(&c));
    let c_gone = format!("{sc} (gone)");
    let c_unnamed = format!("cgroup {c_id}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = |text: &str| {
        let (sums, _) = plain_counts(text);
        let c =
            sums.get(&c_gone).copied().unwrap_or(0) + sums.get(&c_unnamed).copied().unwrap_or(0);
        sums.get(&sa).copied().unwrap_or(0) >= 41
            && sums.get(&sb).copied().unwrap_or(0) >= 61
            && c >= 11
    };
    while !done(&text) && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    // Two more intervals: nothing more may arrive for the groups.
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    drop(top);
    let _ = reader.join();
    let (sums, totals) = plain_counts(&text);
    let rows: Vec<&String> = sums
        .keys()
        .filter(|k| k.contains("forkprof-topplain"))
        .collect();
    assert_eq!(sums.get(&sa), Some(&41), "{rows:?}\n{text}");
    assert_eq!(sums.get(&sb), Some(&61), "{rows:?}\n{text}");
    assert_eq!(totals.get(&sa), Some(&41), "{text}");
    assert_eq!(totals.get(&sb), Some(&61), "{text}");
    // The removed group: its last known path marked gone (or its id, had it been removed
    // before forkprof named it), never its path as if it were there, never another group.
    let c_count =
        sums.get(&c_gone).copied().unwrap_or(0) + sums.get(&c_unnamed).copied().unwrap_or(0);
    assert_eq!(c_count, 1 + 10, "{rows:?}\n{text}");
    assert!(
        rows.iter().all(|r| [&sa, &sb, &c_gone].contains(r)),
        "only a, b and c (gone) of the test's groups: {rows:?}"
    );
}

/// The TOTAL column of the row whose name cell (the first) satisfies `is_row`.
fn row_total(screen: &str, is_row: impl Fn(&str) -> bool) -> Option<u64> {
    screen.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        if !is_row(words.next()?) {
            return None;
        }
        words.nth(1)?.parse().ok()
    })
}

#[test]
fn top_tui_shows_cgroups_and_units_and_cuts_long_paths_from_the_left() {
    needs_root!();
    let mut groups = Groups::new("toptui");
    // Short enough to show whole in a 120-column terminal, and too long to.
    // Units of their own: `top` is system-wide, and other tests run `a.service`s.
    let a = groups.make("tui-a.service");
    let b = groups.make("a-slice-with-a-long-name-to-cut-from-the-left.slice/tui-b.service");
    let t = Tmux::new("fpcgtui", 120);
    t.keys(&[
        &format!("{} top --by cgroup", forkprof().display()),
        "Enter",
    ]);
    wait_for("top's header", forkprof_tests::READY, || {
        let s = t.screen();
        (s.contains("by: cgroup") && s.contains("CGROUP")).then_some(())
    });
    // The header is drawn once tracing has started.
    run_workloads(&a, &b);
    let (sa, sb) = (shown_cgroup(&a), shown_cgroup(&b));
    let b_tail = "/tui-b.service";
    assert!(sb.len() > 40, "{sb}");
    // TOTAL counts since top started: a row shows 41 (61) once all of them are finished.
    let (mut seen_a, mut seen_b) = (0, 0);
    let mut cut = String::new();
    wait_for("both groups' totals", Duration::from_secs(30), || {
        let s = t.screen();
        if let Some(n) = row_total(&s, |name| name == sa) {
            seen_a = n;
        }
        if let Some(n) = row_total(&s, |name| name.starts_with('…') && name.ends_with(b_tail)) {
            seen_b = n;
            cut = s
                .lines()
                .find(|l| l.contains(b_tail))
                .unwrap_or_default()
                .to_string();
        }
        (seen_a >= 41 && seen_b >= 61).then_some(())
    });
    assert_eq!((seen_a, seen_b), (41, 61));
    // Cut from the left: the row keeps the end of the path, not its start.
    assert!(!cut.contains(&sb), "{cut}");
    let name = cut.split_whitespace().next().unwrap();
    assert!(sb.ends_with(name.trim_start_matches('…')), "{name} vs {sb}");
    // `g`: by unit (the same workloads once more: units count since start too), then by
    // binary.
    t.keys(&["g"]);
    wait_for("by unit", Duration::from_secs(5), || {
        let s = t.screen();
        (s.contains("by: unit") && s.contains("UNIT")).then_some(())
    });
    run_workloads(&a, &b);
    let (mut unit_a, mut unit_b) = (0, 0);
    wait_for("both units' totals", Duration::from_secs(30), || {
        let s = t.screen();
        if let Some(n) = row_total(&s, |name| name == "tui-a.service") {
            unit_a = n;
        }
        if let Some(n) = row_total(&s, |name| name == "tui-b.service") {
            unit_b = n;
        }
        (unit_a >= 2 * 41 && unit_b >= 2 * 61).then_some(())
    });
    assert_eq!((unit_a, unit_b), (2 * 41, 2 * 61));
    t.keys(&["g"]);
    wait_for("by binary", Duration::from_secs(5), || {
        let s = t.screen();
        (s.contains("by: binary") && s.contains("BINARY")).then_some(())
    });
    t.keys(&["h"]);
    wait_for("the help's g line", Duration::from_secs(5), || {
        let s = t.screen();
        s.contains("group rows by the next of binary, cgroup, unit")
            .then_some(())
    });
    t.keys(&["q"]);
    std::thread::sleep(Duration::from_millis(300));
}
