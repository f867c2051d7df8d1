//! The report: everything `run` (and later `report`) prints, as one serializable value. The
//! table and JSON outputs both render this, so they always agree.
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::hints::Hint;
use super::mounts::{Mount, mount_of};
use super::phases::{Phase, PhaseMap, atime_updates};
use super::stats::{Accumulator, Summary};
use super::trace::{Binaries, ExitStatus, LostCounts, Names, Origin, Shared, file_name};
use super::{Method, PHASES, Phases, Process, Trace};

pub const REPORT_JSON_VERSION: u32 = 1;

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub forkprof_version: &'static str,
    pub command: Vec<String>,
    /// The command's exit (`run` only).
    pub exit: Option<ExitStatus>,
    /// The wall time the report covers: the run's, or `window`'s part of it.
    pub wall_ns: u64,
    /// The part of the run a `--from`/`--to` report covers (absent: all of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// The recording was not finished: its recorder stopped before its end (it was killed,
    /// or could not write), and what came after is neither in it nor counted as lost.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unfinished: bool,
    pub summary: SummaryCounts,
    pub methods: BTreeMap<&'static str, u64>,
    /// Which kernel hook measured each phase.
    pub sources: PhaseMap<String>,
    pub phases: PhaseMap<Summary>,
    /// Grouping ("binary", "parent", "method", "ancestry") -> rows, sorted.
    pub groups: BTreeMap<&'static str, Vec<GroupRow>>,
    /// Each grouping's number of groups: its rows, unless `Context::group_rows` left some
    /// out.
    #[serde(skip)]
    pub group_counts: BTreeMap<&'static str, usize>,
    /// Findings, each with its numbers and what to do.
    pub hints: Vec<Hint>,
    /// The mount holding the binaries of the processes with the most atime updates, when
    /// the recording machine's mounts are known (what the atime hint advises on).
    #[serde(skip)]
    pub atime_mount: Option<Mount>,
    /// One row per process (omitted when `Context::processes` is false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<ProcessRow>>,
    /// Total spawn cost per ancestry stack ("make;sh;cc1" -> ns), when `Context::folded`.
    #[serde(skip)]
    pub folded: Option<Vec<(String, u64)>>,
}

/// The part of a run a report covers, in ns from the first record.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Window {
    pub from_ns: u64,
    pub to_ns: u64,
    /// The whole run's wall time.
    pub run_ns: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct SummaryCounts {
    pub processes: u64,
    pub threads: u64,
    pub execs: u64,
    pub failed_execs: u64,
    pub failed_spawns: u64,
    /// Spawns whose child the kernel never saw (the syscall was in flight when tracing
    /// began): counted here, not as processes or threads.
    pub spawns_child_unseen: u64,
    pub still_running: u64,
    pub spawn_rate_mean_per_s: f64,
    /// The busiest window's spawns per second (see `peak_per_second`): never below the mean.
    pub spawn_rate_peak_per_s: f64,
    pub atime_updates: u64,
    /// Total `spawn_cost` of all processes divided by wall time (can exceed 1 when
    /// processes spawn in parallel).
    pub spawn_cost_share_of_wall: f64,
    /// Always present, even when 0.
    pub lost_events: u64,
    pub lost: LostCounts,
    /// Exits whose parent notification was not seen (`exit_teardown` not measured).
    pub exits_without_notify: u64,
}

#[derive(Debug, Serialize)]
pub struct GroupRow {
    /// The group's key: a binary path, a method, or an ancestry "a;b;c".
    pub binary: String,
    pub processes: u64,
    pub execs: u64,
    /// The failed exec attempts of the group's processes (a PATH search's, say): they count
    /// in the row of the process that made them, with their `exec_failed` time.
    pub failed_execs: u64,
    /// Every path those attempts named, with how often (absent when none failed).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_exec_paths: BTreeMap<String, u64>,
    /// The searches among those attempts, by the name they looked for (the paths' last
    /// component): a run of failed attempts at one name, in one process, is one search. For
    /// the hints; not in the JSON.
    #[serde(skip)]
    pub failed_exec_searches: BTreeMap<String, u64>,
    /// The group's processes whose page-table copy was measured and that never exec'd: they
    /// ran on in their parent's image (a snapshot, a worker), where posix_spawn and vfork
    /// are no alternative to fork. For the hints; not in the JSON.
    #[serde(skip)]
    pub pagetable_copies_without_exec: u64,
    /// Mean number of objects ld.so loaded (not counting ld.so.cache, or the paths a library
    /// search tried in vain), where measured.
    pub ld_objects_mean: Option<f64>,
    /// Mean number of paths ld.so opened while it mapped them (`openat` calls: each object,
    /// ld.so.cache, and every path a library search tried in vain), from the same windows.
    pub ld_openat_mean: Option<f64>,
    pub methods: BTreeMap<&'static str, u64>,
    pub phases: PhaseMap<Summary>,
}

#[derive(Debug, Serialize)]
pub struct ExecRow {
    pub path: String,
    pub args: Vec<String>,
    pub argc: u32,
    /// 0 on success, else the errno.
    pub errno: i32,
    pub exec_ns: u64,
}

#[derive(Debug, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    /// When the process was created (CLOCK_MONOTONIC), negated for one first seen mid-life
    /// (`ProcKey::stored_start_ns`). (pid, start_ns) identifies a process across pid reuse.
    pub start_ns: i64,
    pub parent_pid: Option<u32>,
    pub method: Method,
    pub binary: String,
    pub parent_binary: String,
    pub execs: Vec<ExecRow>,
    pub exit: Option<ExitStatus>,
    /// Inode-dirty events (atime updates) during this process's execs and ld.so.
    pub atime_updates: u64,
    pub phases: PhaseMap<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// The binary a process ran last.
    Binary,
    /// The binary of the process's parent when it was created.
    Parent,
    /// How the process was created.
    Method,
    /// The chain of binaries from the root to the process (make;sh;gcc;cc1).
    Ancestry,
    /// The process's cgroup v2 path (where it exec'd, else where it was created).
    Cgroup,
    /// The systemd unit or container of that cgroup (`nginx.service`, a container's 12-hex-digit id).
    Unit,
}

impl GroupBy {
    pub fn name(self) -> &'static str {
        match self {
            Self::Binary => "binary",
            Self::Parent => "parent",
            Self::Method => "method",
            Self::Ancestry => "ancestry",
            Self::Cgroup => "cgroup",
            Self::Unit => "unit",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    /// Total spawn cost.
    #[default]
    Total,
    /// Mean spawn cost.
    Mean,
    /// 99th percentile of spawn cost.
    P99,
    /// Number of processes.
    Count,
}

/// Which processes a report covers.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only processes whose binary path contains this.
    pub binary: Option<String>,
    /// Only processes created at or after this many ns from the first record.
    pub from_ns: Option<u64>,
    /// ... and before this many ns from the first record.
    pub to_ns: Option<u64>,
}

impl Filter {
    /// Whether the filter leaves processes out.
    pub fn is_active(&self) -> bool {
        self.binary.is_some() || self.from_ns.is_some() || self.to_ns.is_some()
    }

    /// The wall time the report covers: the `--from`/`--to` window of a run of `wall_ns`.
    pub fn wall_ns(&self, wall_ns: u64) -> u64 {
        let end = self.to_ns.map_or(wall_ns, |t| t.min(wall_ns));
        end.saturating_sub(self.from_ns.unwrap_or(0).min(end))
    }

    /// Whether process `p`, whose binaries are `bins`, is in the report. `first_ns` is the
    /// trace's first record.
    pub fn matches(&self, p: &Process, bins: &Binaries, first_ns: u64) -> bool {
        if let Some(sub) = &self.binary
            && !escape(&bins.last).contains(sub.as_str())
        {
            return false;
        }
        let since_first = p.start_ns().saturating_sub(first_ns);
        !(self.from_ns.is_some_and(|f| since_first < f)
            || self.to_ns.is_some_and(|t| since_first >= t))
    }
}

/// What the model needs to know beyond the records.
pub struct Context<'a> {
    pub command: Vec<String>,
    pub exit: Option<ExitStatus>,
    pub wall_ns: u64,
    pub sources: PhaseMap<String>,
    /// True when the binary at this path is statically linked (no ELF interpreter).
    pub is_static: &'a dyn Fn(&[u8]) -> bool,
    /// The groupings asked for; the report also builds those its hints read (binary and
    /// parent). None at all: no groups and no hints, for a caller that wants the
    /// per-process rows alone (`record`'s derived tables), whose memory then does not grow
    /// with the number of binaries.
    pub groupings: Vec<GroupBy>,
    pub sort: SortBy,
    /// The rows to keep of each grouping asked for: the first this many in `sort`'s order
    /// (the table's `--top`), and those a hint reads, so that the hints are the same;
    /// `None`: every row (JSON, CSV, `diff`).
    pub group_rows: Option<usize>,
    pub filter: Filter,
    /// Include one row per process.
    pub processes: bool,
    /// Sum spawn cost per ancestry stack (for flame graphs): far lighter than grouping by
    /// ancestry, which keeps every phase's distribution per stack.
    pub folded: bool,
    /// Root each flame-graph stack at the process's cgroup (`Cgroup`) or unit (`Unit`).
    pub flame_root: Option<GroupBy>,
}

impl<'a> Context<'a> {
    /// What `forkprof run` reports: binaries and parents, per-process rows.
    pub fn for_run(is_static: &'a dyn Fn(&[u8]) -> bool) -> Self {
        Self {
            command: Vec::new(),
            exit: None,
            wall_ns: 0,
            sources: PhaseMap::default(),
            is_static,
            groupings: vec![GroupBy::Binary, GroupBy::Parent],
            sort: SortBy::Total,
            group_rows: None,
            filter: Filter::default(),
            processes: true,
            folded: false,
            flame_root: None,
        }
    }
}

/// Shows bytes from the kernel (paths, argv) as text: valid UTF-8 stays as it is; invalid
/// bytes become `\xNN`, control characters are escaped (`\n`, `\t`, `\u{7f}` ...), and `\` is
/// doubled, so a line of output never breaks and nothing is lost.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The objects ld.so loaded for the binary a process ran last, and the paths it opened for
/// them: its last dynamic-linker window's, if that one completed (an earlier exec's window
/// is another binary's, such as a wrapper that exec'd the real program).
fn last_binary_objects(p: &Process) -> Option<(u32, u32)> {
    p.lds
        .last()
        .filter(|l| l.outcome == forkprof_common::ld_outcome::COMPLETE)
        .map(|l| (l.objects, l.openat_count))
}

/// What a group adds up while the report is built. It is kept small, and sized by what it
/// holds: a large recording can have a group per process (a build that runs a binary of its
/// own from each temporary directory), and most of its groups then hold one process.
#[derive(Clone, Default)]
struct Group {
    processes: u64,
    execs: u64,
    failed_execs: u64,
    /// The paths and names of the failed attempts (`None` until one fails).
    failed: Option<Box<FailedExecs>>,
    pagetable_copies_without_exec: u64,
    /// Completed dynamic-linker windows of the processes' last binaries, and the objects
    /// and opens summed over them.
    ld_windows: u64,
    ld_objects: u64,
    ld_openat: u64,
    /// Processes by method, in `Method::ALL`'s order.
    methods: [u64; Method::ALL.len()],
    values: Phased,
}

#[derive(Clone, Default)]
struct FailedExecs {
    paths: HashMap<Shared, u64>,
    searches: HashMap<Vec<u8>, u64>,
}

/// The phases' values of a group: until it holds `FEW_VALUES` of them, the values
/// themselves, each tagged with its phase (8 bytes a value); past that, one accumulator per
/// phase (about 1.4 KB, whatever the group's size). Either way the summaries are the same:
/// an accumulator summarises its values whatever their order.
#[derive(Clone)]
enum Phased {
    Few(Vec<u64>),
    Many(Box<[Accumulator]>),
}

/// Values a group keeps as they are before it makes its accumulators (about five
/// processes' phases).
const FEW_VALUES: usize = 64;
/// A tagged value: the phase in the top bits, the value in the others.
const VALUE_BITS: u32 = 59;
const VALUE_MAX: u64 = (1 << VALUE_BITS) - 1;
const _: () = assert!(PHASES.len() <= 1 << (64 - VALUE_BITS));

/// One accumulator per phase, holding the tagged values.
fn accumulators(tagged: &[u64]) -> Box<[Accumulator]> {
    let mut accs = vec![Accumulator::default(); PHASES.len()].into_boxed_slice();
    for &t in tagged {
        accs[(t >> VALUE_BITS) as usize].add(t & VALUE_MAX);
    }
    accs
}

impl Default for Phased {
    fn default() -> Self {
        Self::Few(Vec::new())
    }
}

impl Phased {
    fn add(&mut self, ph: &Phases) {
        for phase in PHASES {
            if let Some(v) = ph.get(phase) {
                self.add_value(phase, v);
            }
        }
    }

    fn add_value(&mut self, phase: Phase, v: u64) {
        match self {
            // A value too large to tag (no duration or count comes near) makes the
            // accumulators at once.
            Self::Few(tagged) if tagged.len() < FEW_VALUES && v <= VALUE_MAX => {
                tagged.push(((phase as u64) << VALUE_BITS) | v);
            }
            Self::Few(tagged) => {
                let mut accs = accumulators(tagged);
                accs[phase as usize].add(v);
                *self = Self::Many(accs);
            }
            Self::Many(accs) => accs[phase as usize].add(v),
        }
    }

    /// The summary of one phase's values (`None`: none), as `summaries` has it.
    fn summary(&mut self, phase: Phase) -> Option<Summary> {
        let s = match self {
            Self::Many(accs) => accs[phase as usize].summary(),
            Self::Few(tagged) => {
                let mut acc = Accumulator::default();
                for &t in tagged.iter().filter(|&&t| t >> VALUE_BITS == phase as u64) {
                    acc.add(t & VALUE_MAX);
                }
                acc.summary()
            }
        };
        (s.count > 0).then_some(s)
    }

    fn summaries(self) -> PhaseMap<Summary> {
        let mut accs = match self {
            Self::Many(accs) => accs,
            Self::Few(tagged) => accumulators(&tagged),
        };
        PHASES
            .iter()
            .filter_map(|&phase| {
                let s = accs[phase as usize].summary();
                (s.count > 0).then_some((phase, s))
            })
            .collect()
    }
}

impl Group {
    fn add_process(&mut self, p: &Process, ph: &Phases) {
        self.processes += 1;
        self.methods[p.method.index()] += 1;
        self.values.add(ph);
        if ph.get(Phase::PagetableCopy).is_some() && !p.execs.iter().any(|e| e.errno == 0) {
            self.pagetable_copies_without_exec += 1;
        }
        if let Some((objects, openat)) = last_binary_objects(p) {
            self.ld_windows += 1;
            self.ld_objects = self.ld_objects.saturating_add(u64::from(objects));
            self.ld_openat = self.ld_openat.saturating_add(u64::from(openat));
        }
    }

    /// Counts the process's failed exec attempts, and its successful execs when
    /// `successful`.
    fn add_execs(&mut self, p: &Process, successful: bool) {
        // The name the run of failed attempts so far looked for.
        let mut searching: Option<&[u8]> = None;
        for e in &p.execs {
            if e.errno == 0 {
                self.execs += u64::from(successful);
                searching = None;
            } else {
                self.failed_execs += 1;
                let failed = self.failed.get_or_insert_with(Box::default);
                *failed.paths.entry(e.path.clone()).or_default() += 1;
                let name = file_name(&e.path);
                if searching != Some(name) {
                    *failed.searches.entry(name.to_vec()).or_default() += 1;
                    searching = Some(name);
                }
            }
        }
    }

    fn row(self, binary: &[u8]) -> GroupRow {
        let failed = self.failed.map(|f| *f).unwrap_or_default();
        GroupRow {
            binary: escape(binary),
            processes: self.processes,
            execs: self.execs,
            failed_execs: self.failed_execs,
            failed_exec_paths: failed
                .paths
                .iter()
                .map(|(path, n)| (escape(path), *n))
                .collect(),
            failed_exec_searches: failed
                .searches
                .iter()
                .map(|(name, n)| (escape(name), *n))
                .collect(),
            pagetable_copies_without_exec: self.pagetable_copies_without_exec,
            ld_objects_mean: (self.ld_windows > 0)
                .then(|| self.ld_objects as f64 / self.ld_windows as f64),
            ld_openat_mean: (self.ld_windows > 0)
                .then(|| self.ld_openat as f64 / self.ld_windows as f64),
            methods: Method::ALL
                .iter()
                .zip(self.methods)
                .filter(|&(_, n)| n > 0)
                .map(|(m, n)| (m.name(), n))
                .collect(),
            phases: self.values.summaries(),
        }
    }
}

/// What a row is ordered by: its spawn cost's total, mean or p99, or its processes.
fn sort_key(cost: Option<&Summary>, processes: u64, sort: SortBy) -> u64 {
    match sort {
        SortBy::Total => cost.map_or(0, |s| s.total),
        SortBy::Mean => cost.map_or(0, |s| s.mean),
        SortBy::P99 => cost.map_or(0, |s| s.p99),
        SortBy::Count => processes,
    }
}

fn row_key(row: &GroupRow, sort: SortBy) -> u64 {
    sort_key(row.phases.get(Phase::SpawnCost), row.processes, sort)
}

/// The order of two rows, given each one's sort key and processes, and their keys (as
/// shown) for a tie: the larger key first, then the more processes, then by name.
fn row_order(a: (u64, u64), b: (u64, u64), names: impl FnOnce() -> Ordering) -> Ordering {
    b.cmp(&a).then_with(names)
}

fn sort_rows(rows: &mut [GroupRow], sort: SortBy) {
    rows.sort_by(|a, b| {
        row_order(
            (row_key(a, sort), a.processes),
            (row_key(b, sort), b.processes),
            || a.binary.cmp(&b.binary),
        )
    });
}

/// The rows of one grouping's groups, in `SortBy::Total`'s order (the hints'): every group's,
/// or, when `shown` is less than the groups, the first `shown` in `sort`'s order and the
/// groups `keep` names (those a hint may read). The table's phase means show the first
/// `shown` rows with processes: those are among the first `shown`, since a row without
/// processes (an exec's path, not a binary any process ended in) has no spawn cost and
/// sorts after every row with processes. Rows are most of a report's memory where
/// there are many groups: only the table, which shows `--top` of them, leaves some out.
fn rows_kept(
    mut groups: HashMap<Shared, Group>,
    shown: Option<usize>,
    sort: SortBy,
    keep: impl Fn(&Shared, &Group) -> bool,
) -> Vec<GroupRow> {
    let mut rows: Vec<GroupRow> = match shown.filter(|&n| n < groups.len()) {
        None => groups.into_iter().map(|(k, g)| g.row(&k)).collect(),
        Some(n) => {
            // Each group's place, as `sort_rows` orders the rows.
            let mut order: Vec<(u64, u64, Shared)> = groups
                .iter_mut()
                .map(|(k, g)| {
                    let cost = g.values.summary(Phase::SpawnCost);
                    (
                        sort_key(cost.as_ref(), g.processes, sort),
                        g.processes,
                        k.clone(),
                    )
                })
                .collect();
            let first = |a: &(u64, u64, Shared), b: &(u64, u64, Shared)| {
                row_order((a.0, a.1), (b.0, b.1), || escape(&a.2).cmp(&escape(&b.2)))
            };
            if n > 0 {
                order.select_nth_unstable_by(n - 1, first);
            }
            order.truncate(n);
            let top: std::collections::HashSet<Shared> =
                order.into_iter().map(|(_, _, k)| k).collect();
            groups
                .into_iter()
                .filter(|(k, g)| top.contains(k) || keep(k, g))
                .map(|(k, g)| g.row(&k))
                .collect()
        }
    };
    sort_rows(&mut rows, SortBy::Total);
    rows
}

/// The groupings to build: those asked for, and those the hints read (binary and parent),
/// so that one recording gives the same hints whatever view is chosen; none when none is
/// asked for.
fn groupings_built(asked: &[GroupBy]) -> Vec<GroupBy> {
    let mut all = asked.to_vec();
    if all.is_empty() {
        return all;
    }
    for by in [GroupBy::Binary, GroupBy::Parent] {
        if !all.contains(&by) {
            all.push(by);
        }
    }
    all
}

/// Spawns per second in the busiest window. The window is the run split into equal parts
/// of at most one second (the whole run when it is shorter than a second; 1 s when the wall
/// time is unknown). Spawn times are counted in steps of a sixteenth of the window, and the
/// window slides over them step by step: memory grows with the run's length, not with its
/// number of spawns. A window that starts between two steps can hold up to one step's
/// spawns more than any counted, and some window holds at least the mean's share, so the
/// peak is never shown below the mean.
pub struct SpawnPeak {
    window_ns: u64,
    step_ns: u64,
    /// Spawns per step, for the steps that have any: a recording's spawn times can be far
    /// apart (or, read from a damaged file, anywhere), so only the steps seen take room.
    counts: std::collections::BTreeMap<u64, u32>,
    /// The step counted last and its spawns not yet in `counts` (spawns mostly come in
    /// order: this spares a map lookup per spawn).
    pending: Option<(u64, u32)>,
    spawns: u64,
}

/// Steps per window.
const PEAK_STEPS: u64 = 16;

impl SpawnPeak {
    pub fn new(wall_ns: u64) -> Self {
        const SECOND: u64 = 1_000_000_000;
        let window_ns = match wall_ns {
            0 => SECOND,
            w => w / w.div_ceil(SECOND),
        }
        .max(PEAK_STEPS);
        Self {
            window_ns,
            step_ns: window_ns / PEAK_STEPS,
            counts: std::collections::BTreeMap::new(),
            pending: None,
            spawns: 0,
        }
    }

    pub fn add(&mut self, t_ns: u64) {
        let step = t_ns / self.step_ns;
        match &mut self.pending {
            Some((s, n)) if *s == step => *n = n.saturating_add(1),
            pending => {
                if let Some((s, n)) = pending.replace((step, 1)) {
                    let c = self.counts.entry(s).or_default();
                    *c = c.saturating_add(n);
                }
            }
        }
        self.spawns += 1;
    }

    /// Spawns per second in the busiest window; `wall_ns` gives the mean it is never below.
    pub fn per_second(&self, wall_ns: u64) -> f64 {
        let mut counts = self.counts.clone();
        if let Some((s, n)) = self.pending {
            let c = counts.entry(s).or_default();
            *c = c.saturating_add(n);
        }
        // The busiest window ends at a step that has spawns: slide over those.
        let mut window: std::collections::VecDeque<(u64, u32)> = Default::default();
        let mut sum = 0u64;
        let mut best = 0u64;
        for (&step, &c) in &counts {
            window.push_back((step, c));
            sum += u64::from(c);
            while let Some(&(first, n)) = window.front()
                && first.saturating_add(PEAK_STEPS) <= step
            {
                sum -= u64::from(n);
                window.pop_front();
            }
            best = best.max(sum);
        }
        let peak = best as f64 * 1e9 / self.window_ns as f64;
        let mean = if wall_ns > 0 {
            self.spawns as f64 * 1e9 / wall_ns as f64
        } else {
            0.0
        };
        peak.max(mean)
    }
}

/// A report built one process at a time: `add` each process of the report (in any order),
/// then `finish`. Memory grows with the number of groups, not of processes.
pub struct ReportBuilder<'c, 'a> {
    ctx: &'c Context<'a>,
    groupings: Vec<GroupBy>,
    groups: Vec<HashMap<Shared, Group>>,
    summary: SummaryCounts,
    methods: BTreeMap<&'static str, u64>,
    all: Phased,
    peak: SpawnPeak,
    spawns: u64,
    spawn_cost_total: u64,
    filtered_threads: u64,
    folded: HashMap<Shared, u64>,
    /// Atime updates by the mount of the binary (index into `trace.mounts`).
    atime_by_mount: HashMap<usize, u64>,
    method_keys: HashMap<&'static str, Shared>,
    /// Cgroup id -> (its `cgroup` key, its `unit` key).
    cgroup_keys: rustc_hash::FxHashMap<u64, (Shared, Shared)>,
    names: Names,
}

/// What `ReportBuilder::add` made of a process that the filter kept.
pub struct Added {
    /// Its phases, as the report counted them (a per-process output reuses them).
    pub phases: Phases,
    /// Its row, when the report has per-process rows.
    pub row: Option<ProcessRow>,
    /// The key of its group under the report's first grouping (`diff` samples it); `None`
    /// when the report has no groupings.
    pub group: Option<Shared>,
    /// The binary it ran last, and its parent's at its creation (its keys by binary and by
    /// parent).
    pub binaries: Binaries,
}

/// One process, as the report needs it: the process, its binaries, and its ancestry
/// (`Origin::ancestry`).
pub struct Item<'p> {
    pub process: &'p Process,
    pub binaries: &'p Binaries,
    pub ancestry: &'p Shared,
}

impl<'p> Item<'p> {
    /// A process handed on by a stream (`model::assemble::Sink`), or of a whole trace.
    pub fn of(process: &'p Process, binaries: &'p Binaries, origin: &'p Origin) -> Self {
        Self {
            process,
            binaries,
            ancestry: &origin.ancestry,
        }
    }
}

impl<'c, 'a> ReportBuilder<'c, 'a> {
    pub fn new(ctx: &'c Context<'a>) -> Self {
        let groupings = groupings_built(&ctx.groupings);
        Self {
            ctx,
            groups: vec![HashMap::new(); groupings.len()],
            groupings,
            summary: SummaryCounts::default(),
            methods: BTreeMap::new(),
            all: Phased::default(),
            peak: SpawnPeak::new(ctx.filter.wall_ns(ctx.wall_ns)),
            spawns: 0,
            spawn_cost_total: 0,
            filtered_threads: 0,
            folded: HashMap::new(),
            atime_by_mount: HashMap::new(),
            method_keys: Method::ALL
                .iter()
                .map(|m| (m.name(), Shared::from(m.name().as_bytes())))
                .collect(),
            cgroup_keys: Default::default(),
            names: Names::default(),
        }
    }

    /// The key of a cgroup grouping (`unit`: the unit of the cgroup), worked out once per
    /// cgroup id.
    fn cgroup_key(&mut self, trace: &Trace, p: &Process, unit: bool) -> Shared {
        let id = p.cgroup_id();
        let (path, of_unit) = match self.cgroup_keys.get(&id) {
            Some(keys) => keys,
            None => {
                let path = super::cgroup::label(trace, p);
                let of_unit = if path.as_ref() == b"?" {
                    path.clone()
                } else {
                    let u = super::cgroup::unit_of(&String::from_utf8_lossy(&path));
                    self.names.label(u.as_bytes())
                };
                // An id named later (a cgroup made during the recording) is looked up
                // again until it has its name.
                if trace.knows_cgroup(id) || id == 0 {
                    self.cgroup_keys.insert(id, (path.clone(), of_unit.clone()));
                }
                return if unit { of_unit } else { path };
            }
        };
        if unit { of_unit.clone() } else { path.clone() }
    }

    /// Adds one process; `trace` gives what is known beyond it (cgroup names, mounts, the
    /// first record's time). Returns its phases, and its row when the report has
    /// per-process rows; `None` when the filter leaves it out.
    pub fn add(&mut self, trace: &Trace, item: Item<'_>) -> Option<Added> {
        let Item {
            process: p,
            binaries: bins,
            ancestry,
        } = item;
        let ctx = self.ctx;
        if !ctx.filter.matches(p, bins, trace.first_ns.unwrap_or(0)) {
            return None;
        }
        if ctx.filter.is_active() {
            self.filtered_threads += u64::from(p.threads);
        }
        let ph = Phases::of(p, super::processes::is_static(p, &bins.last, ctx.is_static));
        let summary = &mut self.summary;
        summary.processes += 1;
        if p.exit.is_none() {
            summary.still_running += 1;
        }
        let atime = atime_updates(p);
        summary.atime_updates = summary.atime_updates.saturating_add(atime);
        if atime > 0
            && let Some(i) = mount_of(&trace.mounts, &bins.last)
        {
            *self.atime_by_mount.entry(i).or_default() += atime;
        }
        if let Some(s) = &p.spawn {
            self.peak.add(s.start_ns);
            self.spawns += 1;
            *self.methods.entry(p.method.name()).or_default() += 1;
        }
        self.all.add(&ph);
        self.spawn_cost_total = self
            .spawn_cost_total
            .saturating_add(ph.get(Phase::SpawnCost).unwrap_or(0));
        for e in &p.execs {
            if e.errno == 0 {
                summary.execs += 1;
            } else {
                summary.failed_execs += 1;
            }
        }
        let needs_stack = ctx.folded || self.groupings.contains(&GroupBy::Ancestry);
        let stack = needs_stack.then(|| self.names.stack(ancestry, &bins.last));
        if ctx.folded
            && let Some(cost) = ph.get(Phase::SpawnCost)
            && cost > 0
            && let Some(stack) = &stack
        {
            let key = match ctx.flame_root {
                Some(by @ (GroupBy::Cgroup | GroupBy::Unit)) => {
                    let root = self.cgroup_key(trace, p, by == GroupBy::Unit);
                    let mut k = frame_of_group(&root);
                    k.push(b';');
                    k.extend_from_slice(stack);
                    self.names.label(&k)
                }
                _ => stack.clone(),
            };
            let f = self.folded.entry(key).or_default();
            *f = f.saturating_add(cost);
        }
        let mut first_group = None;
        for gi in 0..self.groupings.len() {
            let by = self.groupings[gi];
            let key: Shared = match by {
                GroupBy::Binary => bins.last.clone(),
                GroupBy::Parent => bins.at_spawn.clone(),
                GroupBy::Method => self.method_keys[p.method.name()].clone(),
                GroupBy::Ancestry => stack.clone().unwrap_or_else(|| self.names.unknown.clone()),
                GroupBy::Cgroup => self.cgroup_key(trace, p, false),
                GroupBy::Unit => self.cgroup_key(trace, p, true),
            };
            if gi == 0 {
                first_group = Some(key.clone());
            }
            let map = &mut self.groups[gi];
            let group = match map.get_mut(&key) {
                Some(g) => g,
                None => map.entry(key).or_default(),
            };
            group.add_process(p, &ph);
            if by == GroupBy::Binary {
                // Failed attempts count in the process's own row, where their
                // `exec_failed` time is: a PATH search is one finding, in the row of
                // the binary finally exec'd, or of `not found: NAME`. Successful execs
                // count under the path they named.
                group.add_execs(p, false);
                for e in p.execs.iter().filter(|e| e.errno == 0) {
                    map.entry(e.path.clone()).or_default().execs += 1;
                }
            } else {
                group.add_execs(p, true);
            }
        }
        let row = ctx.processes.then(|| ProcessRow {
            pid: p.key.pid,
            start_ns: p.key.stored_start_ns(),
            parent_pid: p.parent.map(|k| k.pid),
            method: p.method,
            binary: escape(&bins.last),
            parent_binary: escape(&bins.at_spawn),
            execs: p
                .execs
                .iter()
                .map(|e| ExecRow {
                    path: escape(&e.path),
                    args: e.args.iter().map(|a| escape(a)).collect(),
                    argc: e.argc,
                    errno: e.errno,
                    exec_ns: e.exec_ns,
                })
                .collect(),
            exit: p.exit_status(),
            atime_updates: atime,
            phases: PHASES
                .iter()
                .filter_map(|&phase| ph.get(phase).map(|v| (phase, v)))
                .collect(),
        });
        Some(Added {
            phases: ph,
            row,
            group: first_group,
            binaries: bins.clone(),
        })
    }

    /// The report of the processes added; `trace` gives the counts kept beyond them (threads,
    /// lost events) and the mounts. `processes`: the rows `add` returned, when kept.
    pub fn finish(self, trace: &Trace, processes: Option<Vec<ProcessRow>>) -> Report {
        let ctx = self.ctx;
        let mut summary = self.summary;
        summary.threads = if ctx.filter.is_active() {
            // A filtered report counts the threads of the processes it covers.
            self.filtered_threads
        } else {
            trace.threads
        };
        summary.failed_spawns = trace.failed_spawns;
        summary.spawns_child_unseen = trace.spawns_child_unseen;
        summary.lost_events = trace.lost.total();
        summary.lost = trace.lost.clone();
        summary.exits_without_notify = trace.exits_without_notify;
        // Rates and shares are of the time the report covers (`--from`/`--to`).
        let wall_ns = ctx.filter.wall_ns(ctx.wall_ns);
        let wall_s = wall_ns as f64 / 1e9;
        if wall_s > 0.0 {
            summary.spawn_rate_mean_per_s = self.spawns as f64 / wall_s;
        }
        summary.spawn_rate_peak_per_s = self.peak.per_second(wall_ns);
        if wall_ns > 0 {
            summary.spawn_cost_share_of_wall = self.spawn_cost_total as f64 / wall_ns as f64;
        }
        // Hints read the rows in one order whatever `--sort` says; the rows are put in the
        // order asked for afterwards.
        let group_counts = self
            .groupings
            .iter()
            .zip(&self.groups)
            .map(|(by, map)| (by.name(), map.len()))
            .collect();
        // Parents first: the binaries their PATH searches looked for are kept for the hints.
        let mut maps: Vec<(GroupBy, HashMap<Shared, Group>)> =
            self.groupings.iter().copied().zip(self.groups).collect();
        maps.sort_by_key(|(by, _)| *by != GroupBy::Parent);
        let mut searched: std::collections::HashSet<String> = Default::default();
        let mut groups: BTreeMap<&'static str, Vec<GroupRow>> = BTreeMap::new();
        for (by, map) in maps {
            // A grouping built for the hints alone shows no row.
            let shown = if ctx.groupings.contains(&by) {
                ctx.group_rows
            } else {
                Some(0)
            };
            let keep = |k: &Shared, g: &Group| {
                super::hints::may_read(by, g.processes, g.failed_execs)
                    || (by == GroupBy::Binary
                        && !searched.is_empty()
                        && searched.contains(&escape(file_name(k))))
            };
            let rows = rows_kept(map, shown, ctx.sort, keep);
            if by == GroupBy::Parent {
                searched.extend(
                    rows.iter()
                        .filter_map(super::hints::searched_name)
                        .map(str::to_string),
                );
            }
            groups.insert(by.name(), rows);
        }
        let mut report = Report {
            schema_version: REPORT_JSON_VERSION,
            forkprof_version: env!("CARGO_PKG_VERSION"),
            command: ctx.command.clone(),
            exit: ctx.exit,
            wall_ns,
            window: (ctx.filter.from_ns.is_some() || ctx.filter.to_ns.is_some()).then(|| {
                let to_ns = ctx.filter.to_ns.map_or(ctx.wall_ns, |t| t.min(ctx.wall_ns));
                Window {
                    from_ns: ctx.filter.from_ns.unwrap_or(0).min(to_ns),
                    to_ns,
                    run_ns: ctx.wall_ns,
                }
            }),
            unfinished: false,
            summary,
            methods: self.methods,
            sources: ctx.sources.clone(),
            phases: self.all.summaries(),
            groups,
            group_counts,
            hints: Vec::new(),
            atime_mount: self
                .atime_by_mount
                .into_iter()
                .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
                .map(|(i, _)| trace.mounts[i].clone()),
            processes,
            folded: ctx.folded.then(|| {
                let mut v: Vec<(String, u64)> = self
                    .folded
                    .into_iter()
                    .map(|(k, v)| (escape(&k), v))
                    .collect();
                v.sort();
                v
            }),
        };
        report.hints = super::hints::find(&report);
        report
            .groups
            .retain(|name, _| ctx.groupings.iter().any(|by| by.name() == *name));
        for rows in report.groups.values_mut() {
            sort_rows(rows, ctx.sort);
        }
        report
    }
}

/// A cgroup or unit as the root frame of a flame graph (';' would split it).
fn frame_of_group(key: &[u8]) -> Vec<u8> {
    key.iter()
        .map(|&b| if b == b';' { b'_' } else { b })
        .collect()
}

impl Report {
    /// The report of every process of `trace` (all in memory: `run`, and small recordings).
    pub fn build(trace: &Trace, ctx: &Context<'_>) -> Self {
        Self::build_each(trace, ctx, |_| {})
    }

    /// `build`, handing `each` what the report made of each process it kept, in order of
    /// creation.
    pub fn build_each(trace: &Trace, ctx: &Context<'_>, mut each: impl FnMut(&Added)) -> Self {
        let order = trace.by_start();
        let mut names = Names::default();
        let origins = trace.origins(&order, &mut names);
        let mut builder = ReportBuilder::new(ctx);
        let mut rows = Vec::new();
        for &i in &order {
            let p = &trace.processes[i];
            let Some(origin) = &origins[i] else { continue };
            let binaries = Binaries {
                at_spawn: origin.at_spawn.clone(),
                last: trace.last_binary(p, origin, &mut names),
            };
            let item = Item::of(p, &binaries, origin);
            if let Some(added) = builder.add(trace, item) {
                each(&added);
                rows.extend(added.row);
            }
        }
        builder.finish(trace, ctx.processes.then_some(rows))
    }

    pub fn group(&self, by: GroupBy) -> &[GroupRow] {
        self.groups.get(by.name()).map_or(&[], Vec::as_slice)
    }

    /// How many groups a grouping has, its rows left out included.
    pub fn group_count(&self, by: &str) -> usize {
        self.group_counts
            .get(by)
            .copied()
            .unwrap_or_else(|| self.groups.get(by).map_or(0, Vec::len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group's values, kept as they are and then in accumulators, summarise as one
    /// accumulator per phase does, across the change of form and with a value too large to
    /// keep tagged.
    #[test]
    fn a_group_summarises_its_values_whatever_their_form() {
        let phases = [Phase::Fork, Phase::Exec, Phase::SpawnCost, Phase::CowFaults];
        for (values, huge_at) in [(10, None), (FEW_VALUES, None), (500, None), (20, Some(3))] {
            let mut group = Phased::default();
            let mut each = vec![Accumulator::default(); PHASES.len()];
            for i in 0..values {
                let phase = phases[i % phases.len()];
                let v = if Some(i) == huge_at {
                    VALUE_MAX + 1
                } else {
                    (i as u64 * 7_919) % 1_000
                };
                group.add_value(phase, v);
                each[phase as usize].add(v);
            }
            assert_eq!(
                matches!(group, Phased::Many(_)),
                values > FEW_VALUES || huge_at.is_some(),
                "{values} values"
            );
            let mut one = group.clone();
            for &phase in &phases {
                let mut acc = each[phase as usize].clone();
                let expected = (acc.summary().count > 0).then(|| acc.summary());
                assert_eq!(one.summary(phase), expected, "{values} values, {phase:?}");
            }
            let summaries = group.summaries();
            for phase in PHASES {
                let mut acc = each[phase as usize].clone();
                let expected = (acc.summary().count > 0).then(|| acc.summary());
                assert_eq!(summaries.get(phase).cloned(), expected, "{phase:?}");
            }
        }
    }

    #[test]
    fn escapes_what_would_break_a_line() {
        assert_eq!(escape(b"/bin/ls"), "/bin/ls");
        assert_eq!(escape(b"a\nb"), "a\\nb");
        assert_eq!(escape(b"caf\xc3\xa9"), "café");
        assert_eq!(escape(b"x\xffy"), "x\\xffy");
        assert_eq!(escape(b"back\\slash"), "back\\\\slash");
    }

    #[test]
    fn peak_counts_a_sliding_second() {
        let peak = |t: &[u64], wall: u64| {
            let mut p = SpawnPeak::new(wall);
            for &x in t {
                p.add(x);
            }
            p.per_second(wall)
        };
        let s = 1_000_000_000;
        assert_eq!(peak(&[], 0), 0.0);
        assert_eq!(peak(&[s + 3, 0, 1, 2], 0), 3.0);
        assert_eq!(peak(&[0, s, 2 * s], 0), 1.0);
        // Out of order, and far apart; times anywhere in u64 take no more room than the
        // steps that have spawns (a damaged file once asked for a terabyte).
        assert_eq!(peak(&[100 * s, 3, 100 * s + 1, 1, 2], 0), 3.0);
        assert_eq!(peak(&[u64::MAX, 0, u64::MAX - 1, 1 << 63], 0), 2.0);
        // Never below the mean: 41 spawns in a 65 ms run are 630.8/s at their peak too (the
        // peak read 41/s before), and 3 spawns spread over 1.2 s are 2.5/s.
        let short: Vec<u64> = (0..41).map(|i| i * 1_500_000).collect();
        let p = peak(&short, 65_000_000);
        assert!((p - 41.0 / 0.065).abs() < 1e-6, "{p}");
        let p = peak(&[0, 600_000_000, 1_199_999_999], 1_200_000_000);
        assert!(p >= 3.0 / 1.2, "{p}");
        // A window that starts between two steps can hold one step's spawns more than any
        // window counted: 10 spawns just before a step's end and 10 just after the next
        // window's start are 20 in the sliding window, 10 to 20 in the counted ones.
        let step = s / 16;
        let mut t: Vec<u64> = (0..10).map(|i| step - 10 + i).collect();
        t.extend((0..10).map(|i| s + i));
        let p = peak(&t, 0);
        assert!((10.0..=20.0).contains(&p), "{p}");
    }
}
