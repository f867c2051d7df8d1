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
    top::{GroupMode, Row as TopRow, SortColumn, TopView, sort_rows},
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
    /// What a row is (`g` cycles binary, cgroup, unit).
    pub group: GroupMode,
    pub sort: SortColumn,
    pub filter: String,
    /// Typing a filter (after '/').
    pub editing: bool,
    pub paused: bool,
    pub help: bool,
}

/// Display width of one character (wide characters take two cells).
fn char_width(c: char) -> usize {
    Span::raw(c.to_string()).width()
}

/// `text` cut from the left to fit `width` cells, with an ellipsis: a long cgroup path
/// keeps its unit and leaf (`…/kubepods-pod1.slice/cri-containerd-1a2b.scope`).
pub fn fit_left(text: &str, width: usize) -> String {
    if text.chars().map(char_width).sum::<usize>() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut kept = Vec::new();
    let mut used = 1; // the ellipsis
    for c in text.chars().rev() {
        let w = char_width(c);
        if used + w > width {
            break;
        }
        used += w;
        kept.push(c);
    }
    std::iter::once('…').chain(kept.into_iter().rev()).collect()
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
        " forkprof top   interval {:.1}s   by: {}   sort: {}{}{}",
        view.interval_s,
        state.group.name(),
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

    let mut owned: Vec<TopRow> = view
        .rows(state.group)
        .iter()
        .filter(|r| state.filter.is_empty() || r.name.contains(&state.filter))
        .cloned()
        .collect();
    sort_rows(&mut owned, state.sort);
    let shown = columns_shown(body.width);
    let widths: Vec<Constraint> = [
        Constraint::Fill(3),
        Constraint::Length(SPAWNS_W),
        Constraint::Length(TOTAL_W),
        Constraint::Length(MEAN_W),
        Constraint::Length(BAR_W),
        Constraint::Fill(2),
    ]
    .into_iter()
    .zip(shown)
    .filter_map(|(w, on)| on.then_some(w))
    .collect();
    // The widths the table will give its columns (its default spacing is 1): long names
    // are cut from the left, so that a path keeps its end.
    let cols = Layout::horizontal(widths.clone())
        .spacing(1)
        .split(Rect::new(0, 0, body.width, 1));
    let name_w = usize::from(cols[0].width);
    let top_w = if shown[5] {
        usize::from(cols[cols.len() - 1].width)
    } else {
        0
    };
    let pick = |cells: [Cell<'static>; 6]| -> Vec<Cell<'static>> {
        cells
            .into_iter()
            .zip(shown)
            .filter_map(|(c, on)| on.then_some(c))
            .collect()
    };
    let table_rows = owned.iter().map(|r| {
        let row = Row::new(pick([
            Cell::from(fit_left(&r.name, name_w)),
            Cell::from(format!("{:>9.1}", r.spawns_per_s)),
            Cell::from(format!("{:>7}", r.total)),
            Cell::from(format!("{:>10}", duration(r.mean_spawn_cost_ns))),
            Cell::from(Line::from(phase_bar(&r.cost_parts_ns))),
            Cell::from(fit_left(&r.top, top_w)),
        ]));
        // A group idle this interval, shown for a minute after its last spawn: dimmed.
        if r.processes == 0 {
            row.style(Style::default().add_modifier(Modifier::DIM))
        } else {
            row
        }
    });
    let (name_col, top_col) = match state.group {
        GroupMode::Binary => ("BINARY", "TOP PARENT"),
        GroupMode::Cgroup => ("CGROUP", "TOP BINARY"),
        GroupMode::Unit => ("UNIT", "TOP BINARY"),
    };
    let table = Table::new(table_rows, widths)
        .header(
            Row::new(pick([
                Cell::from(name_col),
                Cell::from(" SPAWNS/S"),
                Cell::from("  TOTAL"),
                Cell::from("MEAN COST"),
                Cell::from("PHASES"),
                Cell::from(top_col),
            ]))
            .style(Style::default().add_modifier(Modifier::REVERSED)),
        )
        .block(Block::default().borders(Borders::TOP));
    frame.render_widget(table, body);
    let keys = Line::from(" q quit   g group   s sort   / filter   p pause   h help");
    frame.render_widget(Paragraph::new(vec![legend(), keys]), foot);
    if state.help {
        help(frame, body, state.group);
    }
}

/// The least width the name column keeps before another column goes, and the top
/// column's least (the two share what the others leave, 3 to 2).
const NAME_MIN: u16 = 10;
const TOP_MIN: u16 = 7;
/// The fixed widths of the spawns/s, total, mean cost and phase bar columns.
const SPAWNS_W: u16 = 10;
const TOTAL_W: u16 = 8;
const MEAN_W: u16 = 11;
const BAR_W: u16 = BAR_WIDTH as u16 + 1;

/// Which of the table's columns (name, spawns/s, total, mean cost, phases, top) fit in
/// `width` cells, each column after the first taking its width and a space: the name keeps
/// at least `NAME_MIN` cells, and the top and phase columns go first, then the total, then
/// the mean cost. The name and spawns/s always stay.
fn columns_shown(width: u16) -> [bool; 6] {
    // (column, its width with the space before it), in the order they are kept.
    let optional = [
        (3, MEAN_W + 1),
        (2, TOTAL_W + 1),
        (4, BAR_W + 1),
        (5, TOP_MIN + 1),
    ];
    let mut shown = [true, true, false, false, false, false];
    let mut used = NAME_MIN + SPAWNS_W + 1;
    for (column, w) in optional {
        if used + w > width {
            break;
        }
        used += w;
        shown[column] = true;
    }
    shown
}

fn help(frame: &mut Frame<'_>, area: Rect, group: GroupMode) {
    let text = vec![
        Line::from(" forkprof top: process creation on this machine, per binary, cgroup or unit"),
        Line::from(""),
        Line::from(" q, Esc    quit (Esc here closes this help)"),
        Line::from(format!(
            " g         group rows by the next of binary, cgroup, unit (now: {})",
            group.name()
        )),
        Line::from(" s         sort by the next column (spawns/s, mean cost, total cost, name)"),
        Line::from(" /         filter rows by name (Enter ends, Esc clears)"),
        Line::from(" p, space  pause / resume"),
        Line::from(" h, ?      this help, open or closed"),
        Line::from(""),
        Line::from(" Rows are the processes that exited in the last interval, and,"),
        Line::from(" dimmed at 0.0, those that did in the last minute; TOTAL counts"),
        Line::from(" them since top started. Mean cost is spawn_cost; the bar splits"),
        Line::from(" it by phase. A cgroup is its path below the cgroup2 mount"),
        Line::from(" (\"(gone)\": removed since); a unit is its systemd unit or"),
        Line::from(" container id (12 digits)."),
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

/// One line per interval for scripts and logs (`--plain`, `--once`, or no TTY), then one
/// per row of grouping `by` active in the interval: `cgroup=/system.slice/a.service
/// processes=41 total=41 ...` (processes in the interval, and since top started).
pub fn plain_line(view: &TopView, top: usize, by: GroupMode) -> String {
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
    // The interval's rows only: a log line per idle group every interval would be noise.
    for r in view.rows(by).iter().filter(|r| r.processes > 0).take(top) {
        let parts: Vec<String> = Phase::SPAWN_COST_PARTS
            .iter()
            .zip(r.cost_parts_ns)
            .filter(|(_, v)| *v > 0)
            .map(|(p, v)| format!("{}={}", p.name(), v))
            .collect();
        s.push_str(&format!(
            "\n  {}={} processes={} total={} spawns/s={:.1} mean_spawn_cost_ns={} {} {}={}",
            by.name(),
            r.name,
            r.processes,
            r.total,
            r.spawns_per_s,
            r.mean_spawn_cost_ns,
            parts.join(" "),
            by.top_name(),
            r.top
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_from_the_left() {
        let path = "/kubepods.slice/kubepods-burstable.slice/cri-containerd-4f3c2a1b0e9d.scope";
        assert_eq!(fit_left(path, 200), path);
        assert_eq!(fit_left(path, path.len()), path);
        let cut = fit_left(path, 40);
        assert_eq!(cut.chars().count(), 40);
        assert_eq!(cut, "…slice/cri-containerd-4f3c2a1b0e9d.scope");
        // The " (gone)" mark is at the end: it stays.
        assert!(fit_left(&format!("{path} (gone)"), 20).ends_with("9d.scope (gone)"));
        // Wide characters count two cells and are never split.
        assert_eq!(fit_left("/a/日本語", 8), "…/日本語");
        assert_eq!(fit_left("/a/日本語", 6), "…本語");
        assert_eq!(fit_left("/a/日本語", 5), "…本語");
        assert_eq!(fit_left("/a/日本語", 4), "…語");
        assert_eq!(fit_left(path, 1), "…");
        assert_eq!(fit_left(path, 0), "");
    }

    #[test]
    fn a_narrow_terminal_keeps_the_name_column() {
        // name, spawns/s, total, mean, phases, top
        assert_eq!(columns_shown(20), [true, true, false, false, false, false]);
        assert_eq!(columns_shown(40), [true, true, false, true, false, false]);
        assert_eq!(columns_shown(50), [true, true, true, true, false, false]);
        assert_eq!(columns_shown(75), [true, true, true, true, true, false]);
        assert_eq!(columns_shown(80), [true; 6]);
        // Drawn: at 24 columns the binary's name is there, cut from the left.
        let backend = ratatui::backend::TestBackend::new(24, 12);
        let mut terminal = ratatui::Terminal::new(backend).unwrap();
        let mut view = TopView::default();
        view.rows[GroupMode::Binary as usize].push(TopRow {
            name: "/usr/lib/gcc/x86_64-linux-gnu/14/cc1".into(),
            processes: 3,
            total: 3,
            top: "/usr/bin/make".into(),
            ..Default::default()
        });
        terminal
            .draw(|f| draw(f, &view, &ViewState::default()))
            .unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        assert!(screen.contains("/14/cc1"), "{screen}");
        assert!(screen.contains("BINARY"), "{screen}");
    }

    #[test]
    fn plain_lines_name_the_grouping() {
        let mut view = TopView::default();
        view.rows[GroupMode::Cgroup as usize].push(TopRow {
            name: "/test/a.service".into(),
            processes: 41,
            total: 41,
            top: "/bin/true".into(),
            ..Default::default()
        });
        let text = plain_line(&view, 10, GroupMode::Cgroup);
        assert!(
            text.contains("\n  cgroup=/test/a.service processes=41 total=41 spawns/s=0.0"),
            "{text}"
        );
        assert!(text.ends_with("top_binary=/bin/true"), "{text}");
        assert_eq!(plain_line(&view, 10, GroupMode::Binary).lines().count(), 1);
    }
}
