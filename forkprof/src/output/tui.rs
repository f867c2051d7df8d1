//! The full-screen view of `forkprof top` (ratatui): it renders `TopView` snapshots and
//! holds the view state the keys change. `TerminalGuard` and a panic hook put the terminal
//! back on quit, on error and on panic.
use std::io::{self, Stdout};

use ratatui::{
    Frame, Terminal,
    backend::CrosstermBackend,
    crossterm::{
        execute,
        terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
    },
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table},
};

use super::duration;
use crate::model::{
    phases::Phase,
    top::{BinaryRow, SortColumn, TopView, sort_rows},
};

/// Letters and colours of the phase bar, in `Phase::SPAWN_COST_PARTS` order.
const PART_STYLE: [(char, Color); 8] = [
    ('f', Color::Red),
    ('e', Color::Yellow),
    ('x', Color::Magenta),
    ('c', Color::LightCyan),
    ('s', Color::Cyan),
    ('m', Color::Blue),
    ('r', Color::Green),
    ('t', Color::Gray),
];

const BAR_WIDTH: usize = 24;

pub struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(
        io::stdout(),
        LeaveAlternateScreen,
        ratatui::crossterm::cursor::Show
    );
}

impl TerminalGuard {
    pub fn new() -> io::Result<Self> {
        enable_raw_mode()?;
        execute!(io::stdout(), EnterAlternateScreen)?;
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        Ok(Self {
            terminal: Terminal::new(CrosstermBackend::new(io::stdout()))?,
        })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// What the keys change.
#[derive(Default)]
pub struct ViewState {
    pub sort: SortColumn,
    pub filter: String,
    /// Typing a filter (after '/').
    pub editing: bool,
    pub paused: bool,
    pub help: bool,
}

/// The bar splitting a spawn cost by phase, one letter per phase share.
pub fn phase_bar(parts: &[u64; 8]) -> Vec<Span<'static>> {
    let total = parts.iter().fold(0u64, |a, &b| a.saturating_add(b));
    if total == 0 {
        return vec![Span::raw("")];
    }
    let mut spans = Vec::new();
    let mut used = 0;
    for (i, &p) in parts.iter().enumerate() {
        let n = ((p as f64 / total as f64) * BAR_WIDTH as f64).round() as usize;
        let n = n.min(BAR_WIDTH - used);
        used += n;
        if n > 0 {
            let (c, color) = PART_STYLE[i];
            spans.push(Span::styled(
                c.to_string().repeat(n),
                Style::default().fg(color),
            ));
        }
    }
    spans
}

fn legend() -> Line<'static> {
    let mut spans = vec![Span::raw(" bar: ")];
    for (phase, (c, color)) in Phase::SPAWN_COST_PARTS.iter().zip(PART_STYLE) {
        spans.push(Span::styled(
            format!("{c}={} ", phase.name()),
            Style::default().fg(color),
        ));
    }
    Line::from(spans)
}

pub fn draw(frame: &mut Frame<'_>, view: &TopView, state: &ViewState) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(3),
        Constraint::Length(2),
    ])
    .areas(frame.area());
    let status = format!(
        " forkprof top   interval {:.1}s   sort: {}{}{}",
        view.interval_s,
        state.sort.name(),
        if state.filter.is_empty() && !state.editing {
            String::new()
        } else {
            format!(
                "   filter: {}{}",
                state.filter,
                if state.editing { "_" } else { "" }
            )
        },
        if state.paused { "   [PAUSED]" } else { "" }
    );
    let header = vec![
        Line::from(Span::styled(
            status,
            Style::default().add_modifier(Modifier::BOLD),
        )),
        Line::from(format!(
            " spawns/s: now {:.1}   1m avg {:.1}   peak {:.1}     exec/s {:.1}   failed exec/s {:.1}   threads/s {:.1}",
            view.spawn_rate_now,
            view.spawn_rate_1m,
            view.spawn_rate_peak,
            view.exec_rate,
            view.failed_exec_rate,
            view.thread_rate
        )),
        Line::from(format!(
            " lost events {}   processes followed {}",
            view.lost_events, view.in_flight
        )),
    ];
    frame.render_widget(Paragraph::new(header), head);

    let mut rows: Vec<&BinaryRow> = view
        .rows
        .iter()
        .filter(|r| state.filter.is_empty() || r.binary.contains(&state.filter))
        .collect();
    let mut owned: Vec<BinaryRow> = rows.drain(..).cloned().collect();
    sort_rows(&mut owned, state.sort);
    let table_rows = owned.iter().map(|r| {
        Row::new(vec![
            Cell::from(r.binary.clone()),
            Cell::from(format!("{:>9.1}", r.spawns_per_s)),
            Cell::from(format!("{:>10}", duration(r.mean_spawn_cost_ns))),
            Cell::from(Line::from(phase_bar(&r.cost_parts_ns))),
            Cell::from(r.top_parent.clone()),
        ])
    });
    let table = Table::new(
        table_rows,
        [
            Constraint::Fill(3),
            Constraint::Length(10),
            Constraint::Length(11),
            Constraint::Length(BAR_WIDTH as u16 + 1),
            Constraint::Fill(2),
        ],
    )
    .header(
        Row::new(vec![
            "BINARY",
            " SPAWNS/S",
            "MEAN COST",
            "PHASES",
            "TOP PARENT",
        ])
        .style(Style::default().add_modifier(Modifier::REVERSED)),
    )
    .block(Block::default().borders(Borders::TOP));
    frame.render_widget(table, body);
    let keys = Line::from(" q quit   s sort   / filter   p pause   h help");
    frame.render_widget(Paragraph::new(vec![legend(), keys]), foot);
    if state.help {
        help(frame, body);
    }
}

fn help(frame: &mut Frame<'_>, area: Rect) {
    let text = vec![
        Line::from(" forkprof top: process creation on this machine, per binary"),
        Line::from(""),
        Line::from(" q, Esc    quit"),
        Line::from(" s         sort by the next column (spawns/s, mean cost, total cost, binary)"),
        Line::from(" /         filter binaries by name (Enter ends, Esc clears)"),
        Line::from(" p, space  pause / resume"),
        Line::from(" h, ?      this help"),
        Line::from(""),
        Line::from(" Rows are the processes that finished in the last interval."),
        Line::from(" Mean cost is spawn_cost; the bar splits it by phase."),
    ];
    let w = area.width.min(84);
    let h = area.height.min(text.len() as u16 + 2);
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(text).block(Block::default().borders(Borders::ALL).title(" help ")),
        popup,
    );
}

/// One line per interval for scripts and logs (`--plain`, `--once`, or no TTY).
pub fn plain_line(view: &TopView, top: usize) -> String {
    let mut s = format!(
        "spawns/s={:.1} spawns_1m/s={:.1} spawns_peak/s={:.1} exec/s={:.1} failed_exec/s={:.1} threads/s={:.1} lost_events={}",
        view.spawn_rate_now,
        view.spawn_rate_1m,
        view.spawn_rate_peak,
        view.exec_rate,
        view.failed_exec_rate,
        view.thread_rate,
        view.lost_events
    );
    for r in view.rows.iter().take(top) {
        let parts: Vec<String> = Phase::SPAWN_COST_PARTS
            .iter()
            .zip(r.cost_parts_ns)
            .filter(|(_, v)| *v > 0)
            .map(|(p, v)| format!("{}={}", p.name(), v))
            .collect();
        s.push_str(&format!(
            "\n  binary={} spawns/s={:.1} mean_spawn_cost_ns={} {} top_parent={}",
            r.binary,
            r.spawns_per_s,
            r.mean_spawn_cost_ns,
            parts.join(" "),
            r.top_parent
        ));
    }
    s
}
