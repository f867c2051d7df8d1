//! `forkprof top`: the live view, full-screen on a terminal, plain lines otherwise.
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};

use crate::cgroups::cgroup2_mount;
use crate::cli::TopArgs;
use crate::model::top::{Top, TopView};
use crate::output::tui::{self, TerminalGuard, ViewState};
use crate::session::{self, LiveSession, Stop, StopSignals};

/// How often keys are read in the full-screen view.
const KEY_POLL: Duration = Duration::from_millis(50);

/// Whether cgroup `id`, named `path` (below the cgroup2 mount `root`), was removed: its
/// directory is gone, or is another cgroup now (another inode).
fn cgroup_gone(root: Option<&Path>, id: u64, path: &[u8]) -> bool {
    use std::os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _};
    let Some(root) = root else {
        return false;
    };
    let rel = std::ffi::OsStr::from_bytes(path.strip_prefix(b"/").unwrap_or(path));
    std::fs::metadata(root.join(rel)).map_or(true, |m| m.ino() != id)
}

/// Closes an interval: finishes processes and computes the view.
fn interval(
    session: &mut LiveSession,
    top: &mut Top,
    elapsed: Duration,
    cgroup_root: Option<&Path>,
) -> Result<TopView> {
    let sweep = session.sweep()?;
    top.add(&sweep.done);
    Ok(top.tick(
        &sweep.counters,
        sweep.lost,
        sweep.in_flight,
        elapsed.as_secs_f64(),
        &|id, path| cgroup_gone(cgroup_root, id, path),
    ))
}

pub fn run(args: TopArgs) -> Result<i32> {
    let scope = match crate::cgroups::CgroupScope::from_arg(args.cgroup.as_deref()) {
        Ok(scope) => scope,
        Err(why) => {
            eprintln!("forkprof: {why}");
            return Ok(2);
        }
    };
    let runtime = session::runtime()?;
    let _in_runtime = runtime.enter();
    let mut session = LiveSession::start_in(scope.as_ref(), false, args.hooks.ia32_syscalls())?;
    // A scope's cgroup that is removed stops top: nothing can run in it any more.
    let gone = || scope.as_ref().filter(|s| s.is_gone());
    let mut top = Top::default();
    let cgroup_root = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| cgroup2_mount(&m));
    let cgroup_root = cgroup_root.as_deref();
    let plain = args.once || args.plain || !std::io::stdout().is_terminal();
    if plain {
        let mut signals = StopSignals::new()?;
        if args.once {
            // A row counts the processes finished in its interval: the first interval, which
            // starts while the programs attach, holds few of them. `--once` shows the second,
            // the first full one.
            let start = Instant::now();
            let stop =
                runtime.block_on(session.run_until(signals.or_after(Some(args.interval))))?;
            if stop == Stop::Signal {
                return Ok(0);
            }
            interval(&mut session, &mut top, start.elapsed(), cgroup_root)?;
        }
        let mut out = std::io::stdout().lock();
        loop {
            let start = Instant::now();
            let stop =
                runtime.block_on(session.run_until(signals.or_after(Some(args.interval))))?;
            if stop == Stop::Signal {
                return Ok(0);
            }
            let view = interval(&mut session, &mut top, start.elapsed(), cgroup_root)?;
            // A reader that is gone (`forkprof top | head`) ends forkprof quietly (main.rs).
            writeln!(out, "{}", tui::plain_line(&view, args.top, args.by.into()))?;
            out.flush()?;
            if let Some(scope) = gone() {
                eprintln!("{}", scope.gone_message("top stops here"));
                return Ok(0);
            }
            if args.once {
                return Ok(0);
            }
        }
    }
    let mut guard = TerminalGuard::new()?;
    let mut state = ViewState {
        group: args.by.into(),
        ..ViewState::default()
    };
    let mut view = TopView::default();
    let mut started = Instant::now();
    loop {
        runtime.block_on(session.run_until(tokio::time::sleep(KEY_POLL)))?;
        if started.elapsed() >= args.interval {
            let fresh = interval(&mut session, &mut top, started.elapsed(), cgroup_root)?;
            started = Instant::now();
            if let Some(scope) = gone() {
                drop(guard);
                eprintln!("{}", scope.gone_message("top stops here"));
                return Ok(0);
            }
            if !state.paused {
                view = fresh;
            }
        }
        while event::poll(Duration::ZERO)? {
            let Event::Key(key) = event::read()? else {
                continue;
            };
            if key.kind != KeyEventKind::Press {
                continue;
            }
            if state.editing {
                match key.code {
                    KeyCode::Enter => state.editing = false,
                    KeyCode::Esc => {
                        state.editing = false;
                        state.filter.clear();
                    }
                    KeyCode::Backspace => {
                        state.filter.pop();
                    }
                    KeyCode::Char(c) => state.filter.push(c),
                    _ => {}
                }
                continue;
            }
            match key.code {
                // Esc closes the help first, as in most full-screen programs.
                KeyCode::Esc if state.help => state.help = false,
                KeyCode::Char('q') | KeyCode::Esc => return Ok(0),
                KeyCode::Char('g') => state.group = state.group.next(),
                KeyCode::Char('s') => state.sort = state.sort.next(),
                KeyCode::Char('/') => state.editing = true,
                KeyCode::Char('p') | KeyCode::Char(' ') => state.paused = !state.paused,
                KeyCode::Char('h') | KeyCode::Char('?') => state.help = !state.help,
                _ => {}
            }
        }
        guard.terminal.draw(|f| tui::draw(f, &view, &state))?;
    }
}
