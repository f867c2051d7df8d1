//! `forkprof top`: the live view, full-screen on a terminal, plain lines otherwise.
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::TopArgs;
use crate::elf::LoaderCache;
use crate::loader;
use crate::model::top::{Top, TopView};
use crate::output::tui::{self, TerminalGuard, ViewState};
use crate::session::{Session, monotonic_ns};

/// How often keys are read in the full-screen view.
const KEY_POLL: Duration = Duration::from_millis(50);

/// Collects for `interval`, then finishes processes and closes the interval.
fn interval(
    session: &mut Session,
    top: &mut Top,
    loaders: &LoaderCache,
    elapsed: Duration,
) -> Result<TopView> {
    let live = session.live.as_mut().expect("live session");
    let done = live.sweep(monotonic_ns(), &|p| loaders.is_static(p));
    top.add(&done);
    let counters = live.counters.clone();
    let in_flight = live.in_flight();
    let lost = session.losses()?;
    Ok(top.tick(&counters, lost, in_flight, elapsed.as_secs_f64()))
}

pub fn run(args: TopArgs) -> Result<i32> {
    loader::check_privileges()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _in_runtime = runtime.enter();
    let mut session = Session::start_live()?;
    let loaders = LoaderCache::default();
    let mut top = Top::default();
    let plain = args.once || args.plain || !std::io::stdout().is_terminal();
    if plain {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        loop {
            let start = Instant::now();
            let stopped = runtime.block_on(session.run_until(async {
                tokio::select! {
                    _ = tokio::time::sleep(args.interval) => false,
                    _ = int.recv() => true,
                    _ = term.recv() => true,
                }
            }))?;
            if stopped {
                return Ok(0);
            }
            let view = interval(&mut session, &mut top, &loaders, start.elapsed())?;
            println!("{}", tui::plain_line(&view, args.top));
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
            let fresh = interval(&mut session, &mut top, &loaders, started.elapsed())?;
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
