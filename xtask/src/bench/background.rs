//! Background load: the CPUs other processes keep busy during a run, and the runs' cgroup.
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

/// Seconds all CPUs spent busy, seconds this process and the runs used, and the machine's
/// running and stolen ticks, at one time.
#[derive(Clone, Copy)]
pub(super) struct Reading {
    busy: Option<f64>,
    ours: Option<f64>,
    ticks: Option<Ticks>,
}

/// All CPUs' ticks in /proc/stat: running (user, nice, system, irq, softirq; guest time is
/// inside user) and stolen by the host (time a vCPU wanted to run and the hypervisor ran
/// something else).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Ticks {
    running: u64,
    stolen: u64,
}

impl Ticks {
    /// From /proc/stat's text.
    fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // user nice system idle iowait irq softirq steal
        let v = v.get(..8)?;
        Some(Ticks {
            running: v[0] + v[1] + v[2] + v[5] + v[6],
            stolen: v[7],
        })
    }

    fn read() -> Option<Self> {
        Self::parse(&fs::read_to_string("/proc/stat").ok()?)
    }

    /// The share of the CPU time this VM's CPUs wanted since `before` that the host took
    /// (stolen / (running + stolen)); None where they wanted none.
    pub(super) fn stolen_share_since(self, before: Ticks) -> Option<f64> {
        let running = self.running.saturating_sub(before.running);
        let stolen = self.stolen.saturating_sub(before.stolen);
        let wanted = running + stolen;
        (wanted > 0).then(|| stolen as f64 / wanted as f64)
    }
}

/// Where the CPU time of the machine went: to find how busy other processes kept it
/// while a run was measured.
pub(super) struct Clock {
    /// USER_HZ: the unit of /proc/stat and /proc/self/stat.
    ticks_per_s: f64,
    /// A cgroup v2 group every run is started in, so that its CPU time is known even when
    /// a tool does not reap the loop (perf trace does not). Without one, a run's CPU time
    /// is what this process's reaped descendants used.
    cgroup: Option<PathBuf>,
}

impl Clock {
    pub(super) fn new() -> Result<Self> {
        let hz = crate::output(Command::new("getconf").arg("CLK_TCK"));
        let ticks_per_s = hz.trim().parse::<f64>().unwrap_or(100.0);
        let mut clock = Clock {
            ticks_per_s,
            cgroup: None,
        };
        clock
            .busy(Ticks::read())
            .context("cannot read /proc/stat")?;
        clock.ours().context("cannot read /proc/self/stat")?;
        clock.cgroup = make_cgroup();
        if clock.cgroup.is_none() {
            eprintln!(
                "xtask: bench: no cgroup v2 to run in: a tool that does not reap the loop \
                 will show its CPU time as background load"
            );
        }
        Ok(clock)
    }

    /// Seconds all CPUs spent busy (user, nice, system, irq, softirq) or stolen by the host.
    fn busy(&self, ticks: Option<Ticks>) -> Option<f64> {
        let t = ticks?;
        Some((t.running + t.stolen) as f64 / self.ticks_per_s)
    }

    /// Seconds of CPU used by this process and by the runs: the runs' cgroup if there is
    /// one, else every descendant this process has reaped.
    fn ours(&self) -> Option<f64> {
        let stat = fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<&str> = stat
            .get(stat.rfind(')')? + 1..)?
            .split_whitespace()
            .collect();
        // after "pid (comm)": state is field 3; utime, stime, cutime, cstime are 14..=17
        let ticks: Option<Vec<u64>> = fields
            .get(11..15)?
            .iter()
            .map(|f| f.parse::<u64>().ok())
            .collect();
        let ticks = ticks?;
        match &self.cgroup {
            None => Some(ticks.iter().sum::<u64>() as f64 / self.ticks_per_s),
            Some(dir) => {
                let own = (ticks[0] + ticks[1]) as f64 / self.ticks_per_s;
                let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
                let usec: u64 = stat
                    .lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))?
                    .trim()
                    .parse()
                    .ok()?;
                Some(own + usec as f64 / 1e6)
            }
        }
    }

    /// A reading now, to give [`Clock::others`] and [`Reading::stolen_since`] later.
    pub(super) fn reading(&self) -> Reading {
        let ticks = Ticks::read();
        Reading {
            busy: self.busy(ticks),
            ours: self.ours(),
            ticks,
        }
    }

    /// CPUs kept busy by others, on average, between `before` and `now`, `seconds` apart.
    pub(super) fn others(&self, before: Reading, now: Reading, seconds: f64) -> Option<f64> {
        let (b0, o0) = (before.busy?, before.ours?);
        let (b1, o1) = (now.busy?, now.ours?);
        (seconds > 0.0).then(|| ((b1 - b0) - (o1 - o0)).max(0.0) / seconds)
    }

    /// `cmd`, started inside the runs' cgroup when there is one (its environment is not
    /// carried over: set it on the result).
    pub(super) fn wrap(&self, cmd: Command) -> Command {
        let Some(dir) = &self.cgroup else {
            return cmd;
        };
        let mut sh = Command::new("/bin/sh");
        sh.args(["-c", "echo $$ > \"$1\" && shift && exec \"$@\"", "sh"])
            .arg(dir.join("cgroup.procs"))
            .arg(cmd.get_program())
            .args(cmd.get_args());
        sh
    }

    /// Waits (up to 20 s) for half a second in which other processes keep fewer than
    /// `max_background` CPUs busy, so that a pair does not start in the middle of a build.
    pub(super) fn wait_quiet(&self, max_background: f64) {
        let window = Duration::from_millis(500);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut said = false;
        while Instant::now() < deadline {
            let before = self.reading();
            thread::sleep(window);
            let Some(cpus) = self.others(before, self.reading(), window.as_secs_f64()) else {
                return;
            };
            if cpus <= max_background {
                return;
            }
            if !said {
                eprintln!(
                    "xtask: bench: {cpus:.2} CPUs busy elsewhere: waiting (up to 20 s) \
                     for the machine to be quieter"
                );
                said = true;
            }
        }
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        if let Some(dir) = &self.cgroup {
            // fails only if a process is still inside; the empty group is harmless then
            let _ = fs::remove_dir(dir);
        }
    }
}

impl Reading {
    /// The share of the CPU time this VM wanted between `before` and this reading that the
    /// host took (see [`Ticks::stolen_share_since`]); None where either could not be read.
    pub(super) fn stolen_since(&self, before: &Reading) -> Option<f64> {
        self.ticks?.stolen_share_since(before.ticks?)
    }
}

/// A reading of the machine's ticks alone, for [`Reading::stolen_since`].
pub(super) fn ticks_now() -> Reading {
    Reading {
        busy: None,
        ours: None,
        ticks: Ticks::read(),
    }
}

/// A fresh cgroup v2 group for the runs, if this machine has a writable cgroup2 mount.
fn make_cgroup() -> Option<PathBuf> {
    let mount = super::tools::cgroup2_mount()?;
    let dir = mount.join(format!("forkprof-bench-{}", std::process::id()));
    if !dir.is_dir() {
        fs::create_dir(&dir).ok()?;
    }
    let procs = dir.join("cgroup.procs");
    // what every run will do: a shell moves itself in, then execs the run
    let moved = Command::new("/bin/sh")
        .args(["-c", "echo $$ > \"$1\"", "sh"])
        .arg(&procs)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let usable = moved
        && fs::read_to_string(dir.join("cpu.stat"))
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("usage_usec ")));
    if !usable {
        let _ = fs::remove_dir(&dir);
        return None;
    }
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stolen_share_is_of_the_time_the_cpus_wanted() {
        let stat = |user, idle, steal| {
            format!("cpu  {user} 0 100 {idle} 5 1 2 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
        };
        let before = Ticks::parse(&stat(1000, 9000, 50)).unwrap();
        assert_eq!(
            before,
            Ticks {
                running: 1103,
                stolen: 50
            }
        );
        // 300 ticks run and 100 stolen since: a quarter of what the CPUs wanted; idle time
        // does not count.
        let after = Ticks::parse(&stat(1300, 20000, 150)).unwrap();
        assert_eq!(after.stolen_share_since(before), Some(0.25));
        assert_eq!(before.stolen_share_since(before), None);
        assert_eq!(Ticks::parse("cpu  1 2 3\n"), None);
        assert_eq!(Ticks::parse("intr 5\n"), None);
    }
}
