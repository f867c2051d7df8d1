//! `forkprof top`: the live view, full-screen on a terminal, plain lines otherwise.
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};

use crate::cli::TopArgs;
use crate::model::top::{Top, TopView};
use crate::output::tui::{self, TerminalGuard, ViewState};
use crate::session::{self, LiveSession, Stop, StopSignals};

/// How often keys are read in the full-screen view.
const KEY_POLL: Duration = Duration::from_millis(50);

/// Closes an interval: finishes processes and computes the view.
fn interval(session: &mut LiveSession, top: &mut Top, elapsed: Duration) -> Result<TopView> {
    let sweep = session.sweep()?;
    top.add(&sweep.done);
    Ok(top.tick(
        &sweep.counters,
        sweep.lost,
        sweep.in_flight,
        elapsed.as_secs_f64(),
    ))
}

pub fn run(args: TopArgs) -> Result<i32> {
    let runtime = session::runtime()?;
    let _in_runtime = runtime.enter();
    let mut session = LiveSession::start()?;
    let mut top = Top::default();
    let plain = args.once || args.plain || !std::io::stdout().is_terminal();
    if plain {
        let mut signals = StopSignals::new()?;
        if args.once {
            // A row counts the processes finished in its interval, and a process is finished
            // `GRACE_NS` after its exit: the first interval holds few of them. `--once` shows
            // the second, the first full one.
            let start = Instant::now();
            let stop =
                runtime.block_on(session.run_until(signals.or_after(Some(args.interval))))?;
            if stop == Stop::Signal {
                return Ok(0);
            }
            interval(&mut session, &mut top, start.elapsed())?;
        }
        let mut out = std::io::stdout().lock();
        loop {
            let start = Instant::now();
            let stop =
                runtime.block_on(session.run_until(signals.or_after(Some(args.interval))))?;
            if stop == Stop::Signal {
                return Ok(0);
            }
            let view = interval(&mut session, &mut top, start.elapsed())?;
            // A reader that is gone (`forkprof top | head`) ends forkprof quietly (main.rs).
            writeln!(out, "{}", tui::plain_line(&view, args.top))?;
            out.flush()?;
            if args.once {
                return Ok(0);
            }
        }
    }
    let mut guard = TerminalGuard::new()?;
    let mut state = ViewState::default();
    let mut view = TopView::default();
    let mut started = Instant::now();
    loop {
        runtime.block_on(session.run_until(tokio::time::sleep(KEY_POLL)))?;
        if started.elapsed() >= args.interval {
            let fresh = interval(&mut session, &mut top, started.elapsed())?;
            started = Instant::now();
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
                KeyCode::Char('q') | KeyCode::Esc => return Ok(0),
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
