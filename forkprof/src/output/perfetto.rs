//! A trace-event JSON timeline (ui.perfetto.dev, chrome://tracing): one track per process,
//! slices for its phases, and a flow arrow from each parent's fork to the child.
use crate::model::phases::Phase;
use rustc_hash::{FxHashMap, FxHashSet};
use std::io::Write;

use anyhow::Result;
use forkprof_common::{ProcKey, ld_outcome};
use serde_json::{Value, json};

use crate::model::{
    Process, Trace,
    report::{Filter, escape},
};

/// A timeline written as it is made, one process at a time: a timeline of millions of
/// slices is never held in memory. Each process gets a track, numbered when it is first
/// needed (by the process, or by the fork slice of a child that ended before it).
pub struct Timeline<'a> {
    out: &'a mut dyn Write,
    written: u64,
    origin: u64,
    tracks: FxHashMap<ProcKey, usize>,
    /// The processes drawn, while `children_first` is off (on, a drawn one leaves `tracks`).
    drawn: FxHashSet<ProcKey>,
    next_track: usize,
    /// Forget a process's track once it is drawn: set when every child is drawn before its
    /// parent (a stream), so that only the tracks of processes not yet drawn are kept.
    pub children_first: bool,
}

impl<'a> Timeline<'a> {
    /// Starts the timeline; times are shown from `origin` (the first record's, ns).
    pub fn begin(out: &'a mut dyn Write, origin: u64) -> Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(Self {
            out,
            written: 0,
            origin,
            tracks: FxHashMap::default(),
            drawn: FxHashSet::default(),
            next_track: 1,
            children_first: false,
        })
    }

    /// Ends the timeline. A track that holds only the fork slices of a parent that was not
    /// drawn (the filter left it out) is named as such, so that it is not a bare number.
    pub fn end(mut self) -> Result<()> {
        let mut undrawn: Vec<(usize, u32)> = self
            .tracks
            .iter()
            .filter(|(key, _)| !self.drawn.contains(key))
            .map(|(key, &track)| (track, key.pid))
            .collect();
        undrawn.sort_unstable();
        for (track, pid) in undrawn {
            self.emit(json!({
                "name": "process_name", "ph": "M", "pid": track,
                "args": {"name": format!("[{pid}] (not drawn: outside the filter)")},
            }))?;
        }
        self.out.write_all(b"\n]}\n")?;
        Ok(())
    }

    /// The track of a process; a process drawn already does not need its number again.
    fn track(&mut self, key: ProcKey) -> usize {
        *self.tracks.entry(key).or_insert_with(|| {
            self.next_track += 1;
            self.next_track - 1
        })
    }

    fn emit(&mut self, event: Value) -> Result<()> {
        if self.written > 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *self.out, &event)?;
        self.written += 1;
        Ok(())
    }

    fn us(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.origin) as f64 / 1e3
    }

    fn slice(
        &mut self,
        track: usize,
        name: &str,
        start_ns: u64,
        dur_ns: u64,
        args: Value,
    ) -> Result<()> {
        let ts = self.us(start_ns);
        self.emit(json!({
            "name": name, "cat": "spawn", "ph": "X", "pid": track, "tid": track,
            "ts": ts, "dur": dur_ns as f64 / 1e3, "args": args,
        }))
    }

    /// Draws one process, whose last binary is `binary`; one still running at `last_ns`
    /// (the last record's time) is drawn up to then. A fork slice is drawn on its parent's
    /// track.
    pub fn process(&mut self, p: &Process, binary: &[u8], last_ns: u64) -> Result<()> {
        let id = self.track(p.key);
        if self.children_first {
            self.tracks.remove(&p.key);
        } else {
            self.drawn.insert(p.key);
        }
        let bin = escape(binary);
        self.emit(json!({
            "name": "process_name", "ph": "M", "pid": id,
            "args": {"name": format!("{bin} [{}]", p.key.pid)},
        }))?;
        // Only what was seen is drawn. The process slice starts at its creation; a process
        // not created under tracing (the one `run` started, or one that existed before
        // tracing began) starts at its first exec, and without one it has no slice: its
        // start is unknown, and a slice from the trace's start would be made up.
        let created = match &p.spawn {
            Some(s) => Some(s.ts_ns.min(p.key.start_ns.max(s.start_ns))),
            None => p
                .execs
                .first()
                .map(|e| e.ts_ns.saturating_sub(e.exec_ns).max(self.origin)),
        };
        if let Some(created) = created {
            let end = p
                .exit
                .map(|x| x.exit_ns.saturating_add(x.exit_teardown_ns))
                .unwrap_or(last_ns)
                .max(created);
            self.slice(
                id,
                "process",
                created,
                end - created,
                json!({"pid": p.key.pid, "method": p.method.name()}),
            )?;
        }
        let created = created.unwrap_or(self.origin);
        if let Some(s) = &p.spawn
            && let Some(parent) = p.parent.map(|k| self.track(k))
        {
            self.slice(
                parent,
                Phase::Fork.name(),
                s.start_ns,
                s.fork_ns,
                json!({"child": p.key.pid, "pagetable_copy_ns": s.pagetable_copy_ns}),
            )?;
            if s.vfork_wait_ns > 0 {
                self.slice(
                    parent,
                    Phase::VforkWait.name(),
                    s.start_ns.saturating_add(s.fork_ns),
                    s.vfork_wait_ns,
                    json!({}),
                )?;
            }
            let flow = json!({"name": "spawn", "cat": "spawn", "id": id, "pid": parent, "tid": parent, "ph": "s", "ts": self.us(s.start_ns)});
            self.emit(flow)?;
            self.emit(json!({"name": "spawn", "cat": "spawn", "id": id, "pid": id, "tid": id, "ph": "f", "bp": "e", "ts": self.us(created)}))?;
        }
        for e in &p.execs {
            let start = e.ts_ns.saturating_sub(e.exec_ns);
            if e.errno != 0 {
                self.slice(
                    id,
                    Phase::ExecFailed.name(),
                    start,
                    e.exec_ns,
                    json!({"path": escape(&e.path), "errno": e.errno}),
                )?;
                continue;
            }
            self.slice(
                id,
                Phase::Exec.name(),
                start,
                e.exec_ns,
                json!({"path": escape(&e.path)}),
            )?;
            // 0: the point of no return was not seen (its hook did not attach).
            if e.exec_prepare_ns > 0 {
                self.slice(
                    id,
                    Phase::ExecPrepare.name(),
                    start,
                    e.exec_prepare_ns,
                    json!({}),
                )?;
                self.slice(
                    id,
                    Phase::ExecLoad.name(),
                    start.saturating_add(e.exec_prepare_ns),
                    e.exec_load_ns,
                    json!({}),
                )?;
            }
        }
        for ld in &p.lds {
            if ld.outcome != ld_outcome::COMPLETE {
                continue;
            }
            let reloc = ld.ts_ns.saturating_sub(ld.ld_reloc_init_ns);
            let map = reloc.saturating_sub(ld.ld_map_ns);
            let start = map.saturating_sub(ld.ld_start_ns);
            self.slice(id, Phase::LdStart.name(), start, ld.ld_start_ns, json!({}))?;
            self.slice(
                id,
                Phase::LdMap.name(),
                map,
                ld.ld_map_ns,
                json!({"objects": ld.objects}),
            )?;
            self.slice(
                id,
                Phase::LdRelocInit.name(),
                reloc,
                ld.ld_reloc_init_ns,
                json!({}),
            )?;
        }
        if let Some(x) = &p.exit
            && x.notified
        {
            self.slice(
                id,
                Phase::ExitTeardown.name(),
                x.exit_ns,
                x.exit_teardown_ns,
                json!({"exit_code": x.exit_code}),
            )?;
        }
        Ok(())
    }
}

/// Writes the processes of `trace` that `filter` keeps (the same filter as the report's),
/// in creation order.
pub fn write(trace: &Trace, filter: &Filter, out: &mut dyn Write) -> Result<()> {
    let first_ns = trace.first_ns.unwrap_or(0);
    let all = trace.by_start();
    let binaries = trace.binaries(&all);
    let mut t = Timeline::begin(out, first_ns)?;
    for i in all {
        let p = &trace.processes[i];
        if filter.matches(p, &binaries[i], first_ns) {
            t.process(p, &binaries[i].last, trace.last_ns)?;
        }
    }
    t.end()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Record;
    use crate::model::tests_support::*;

    /// Only what was seen is drawn: a process that existed before tracing began has no
    /// process slice (it used to span from the trace's start, 9 s in a system-wide
    /// recording), and an exec whose point of no return was not seen has no empty
    /// exec_prepare and exec_load slices.
    #[test]
    fn draws_no_phase_that_was_not_seen() {
        let mut t = Trace::default();
        let old = key(300, 0);
        let child = key(301, 5_000_000);
        t.ingest(spawn(old, child, 56, SIGCHLD));
        let Record::Exec(mut e) = exec(child, 9_000_000, b"/bin/ls", 0, 0) else {
            unreachable!()
        };
        (e.exec_prepare_ns, e.exec_load_ns) = (0, 0);
        t.ingest(Record::Exec(e));
        t.ingest(exit(child, 0));
        t.ingest(exit(old, 0));
        let mut out = Vec::new();
        write(&t, &Filter::default(), &mut out).unwrap();
        let json: Value = serde_json::from_slice(&out).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let slices = |name: &str| {
            events
                .iter()
                .filter(|e| e["ph"] == "X" && e["name"] == name)
                .count()
        };
        assert_eq!(slices("process"), 1, "only the child's creation was seen");
        assert_eq!(slices("fork"), 1);
        assert_eq!(slices("exec"), 1);
        assert_eq!(slices("exec_prepare") + slices("exec_load"), 0);
        assert_eq!(slices("exit_teardown"), 2, "both exits were seen");
    }

    /// A parent that the filter leaves out still holds its child's fork slice: its track is
    /// named as not drawn, in memory and in a stream alike, instead of being a bare number.
    #[test]
    fn a_parent_left_out_by_the_filter_has_a_named_track() {
        let mut t = Trace::default();
        let sh = key(300, 1_000);
        let child = key(301, 5_000_000);
        t.ingest(exec(sh, 200_000, b"/bin/sh", 0, 0));
        t.ingest(spawn(sh, child, 56, SIGCHLD));
        t.ingest(exec(child, 9_000_000, b"/bin/ls", 0, 0));
        t.ingest(exit(child, 0));
        t.ingest(exit(sh, 0));
        let filter = Filter {
            binary: Some("ls".into()),
            ..Filter::default()
        };
        let names = |out: &[u8]| -> Vec<String> {
            let json: Value = serde_json::from_slice(out).unwrap();
            let mut names: Vec<String> = json["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["ph"] == "M")
                .map(|e| e["args"]["name"].as_str().unwrap().to_string())
                .collect();
            names.sort();
            names
        };
        let want = vec![
            "/bin/ls [301]".to_string(),
            "[300] (not drawn: outside the filter)".to_string(),
        ];
        let mut out = Vec::new();
        write(&t, &filter, &mut out).unwrap();
        assert_eq!(names(&out), want);
        // The same children first, as a stream draws them.
        let mut out = Vec::new();
        let mut timeline = Timeline::begin(&mut out, 0).unwrap();
        timeline.children_first = true;
        let all = t.by_start();
        let binaries = t.binaries(&all);
        for &i in all.iter().rev() {
            if filter.matches(&t.processes[i], &binaries[i], 0) {
                timeline
                    .process(&t.processes[i], &binaries[i].last, t.last_ns)
                    .unwrap();
            }
        }
        timeline.end().unwrap();
        assert_eq!(names(&out), want);
    }
}
