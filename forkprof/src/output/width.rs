//! Fitting the human tables to a terminal's width. A pipe or a file gets every column and
//! full paths; a terminal gets tables no wider than it: cells wrap only between words (path
//! components, list items), never inside a name, and what still does not fit is left out
//! (the least useful column first) or, for the wide phase tables, split into several tables.
use std::collections::HashMap;
use std::io::IsTerminal;
use std::os::fd::AsRawFd;

use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

/// The width to fit when `stream` is a terminal: `COLUMNS` if set, else the terminal's
/// size, else 80. `None` for a pipe or a file: they keep everything.
pub fn of<T: IsTerminal + AsRawFd>(stream: &T) -> Option<usize> {
    if !stream.is_terminal() {
        return None;
    }
    let columns = std::env::var("COLUMNS").ok();
    if let Some(c) = columns.and_then(|v| v.trim().parse::<usize>().ok())
        && c > 0
    {
        return Some(c);
    }
    // SAFETY: winsize is plain data; TIOCGWINSZ writes one into `ws` or fails.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    Some(if rc == 0 && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        80
    })
}

/// [`of`] standard output (`forkprof report`, `forkprof bench`).
pub fn stdout() -> Option<usize> {
    of(&std::io::stdout())
}

/// [`of`] standard error (`forkprof run`'s report).
pub fn stderr() -> Option<usize> {
    of(&std::io::stderr())
}

/// Where a cell's text may break between lines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wrap {
    /// Nowhere.
    Never,
    /// At spaces.
    Words,
    /// After a `/`: a path's directories go on, its last component stays whole.
    Path,
    /// After a ", " of a list ("fork 10, vfork 2"): items stay whole.
    Items,
}

/// The pieces a line may break between, and what joins two of them on one line.
fn pieces(text: &str, wrap: Wrap) -> (Vec<String>, &'static str) {
    match wrap {
        Wrap::Never => (vec![text.to_string()], ""),
        Wrap::Words => (text.split(' ').map(String::from).collect(), " "),
        Wrap::Path => (text.split_inclusive('/').map(String::from).collect(), ""),
        Wrap::Items => (
            text.split_inclusive(", ")
                .map(|s| s.trim_end().to_string())
                .collect(),
            " ",
        ),
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The narrowest `text` can be: its widest piece.
fn min_width(text: &str, wrap: Wrap) -> usize {
    pieces(text, wrap)
        .0
        .iter()
        .map(|p| chars(p))
        .max()
        .unwrap_or(0)
}

/// `text` broken into lines of at most `width` characters, between pieces only (a piece
/// wider than `width` gets a line of its own).
pub fn wrap(text: &str, wrap: Wrap, width: usize) -> String {
    let (pieces, join) = pieces(text, wrap);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for p in pieces {
        if !line.is_empty() && chars(&line) + chars(join) + chars(&p) > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push_str(join);
        }
        line.push_str(&p);
    }
    lines.push(line);
    lines.join("\n")
}

/// `first` then `items` joined by `sep`, in lines of at most `width` characters; lines after
/// the first start with `indent`. An item wider than a line gets a line of its own.
pub fn wrap_items(first: &str, items: &[String], sep: &str, indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for item in items {
        if !empty && chars(&line) + chars(sep) + chars(item) > width {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
            empty = true;
        }
        if !empty {
            line.push_str(sep);
        }
        line.push_str(item);
        empty = false;
    }
    out.push_str(&line);
    out
}

/// Prose in lines of at most `width` characters, broken at spaces; `text`'s leading spaces
/// start the first line and `indent` the others.
pub fn wrap_prose(text: &str, indent: &str, width: usize) -> String {
    let body = text.trim_start_matches(' ');
    let lead = &text[..text.len() - body.len()];
    let words: Vec<String> = body.split(' ').map(String::from).collect();
    wrap_items(lead, &words, " ", indent, width)
}

/// Short names for paths: each path's last component, or as many of its last components as
/// tell it apart from the others (`…/local/bin/cc` beside `…/usr/bin/cc`).
pub fn short_paths(paths: &[&str]) -> Vec<String> {
    let split: Vec<Vec<&str>> = paths.iter().map(|p| p.split('/').collect()).collect();
    let suffix = |parts: &[&str], k: usize| parts[parts.len().saturating_sub(k)..].join("/");
    let most = split.iter().map(Vec::len).max().unwrap_or(0);
    let mut counts: Vec<HashMap<String, usize>> = vec![HashMap::new(); most + 1];
    let mut distinct: Vec<&Vec<&str>> = split.iter().collect();
    distinct.sort();
    distinct.dedup();
    for parts in distinct {
        for (k, c) in counts.iter_mut().enumerate().skip(1) {
            *c.entry(suffix(parts, k)).or_default() += 1;
        }
    }
    split
        .iter()
        .zip(paths)
        .map(|(parts, path)| {
            let k = (1..parts.len())
                .find(|&k| counts[k][&suffix(parts, k)] == 1)
                .unwrap_or(parts.len());
            match k {
                1 => parts[parts.len() - 1].to_string(),
                k if k == parts.len() => path.to_string(),
                k => format!("…/{}", suffix(parts, k)),
            }
        })
        .collect()
}

/// One column of a table to fit.
#[derive(Clone, Debug)]
pub struct Column {
    /// Its header, which breaks at spaces only.
    pub header: String,
    pub cells: Vec<String>,
    pub right: bool,
    pub wrap: Wrap,
    /// Whether it may be left out, and when: higher goes first. `None`: never.
    pub drop: Option<u8>,
}

impl Column {
    pub fn new(header: &str, cells: Vec<String>) -> Self {
        Self {
            header: header.to_string(),
            cells,
            right: true,
            wrap: Wrap::Never,
            drop: None,
        }
    }

    pub fn left(mut self, wrap: Wrap) -> Self {
        self.right = false;
        self.wrap = wrap;
        self
    }

    pub fn wrap(mut self, wrap: Wrap) -> Self {
        self.wrap = wrap;
        self
    }

    pub fn drop(mut self, order: u8) -> Self {
        self.drop = Some(order);
        self
    }

    fn min(&self) -> usize {
        let cells = self.cells.iter().map(|c| min_width(c, self.wrap));
        cells.fold(min_width(&self.header, Wrap::Words), usize::max)
    }

    fn natural(&self) -> usize {
        self.cells
            .iter()
            .map(|c| chars(c))
            .fold(chars(&self.header), usize::max)
    }
}

/// A table's width with these content widths: `│ a ┆ b │`.
fn outer(widths: impl Iterator<Item = usize>) -> usize {
    widths.fold(1, |w, c| w + c + 3)
}

/// A fitted table, and the headers of the columns left out.
pub struct Fitted {
    pub table: Table,
    pub left_out: Vec<String>,
}

/// `cols` as one table for a pipe or a file: every column at its natural width, no name
/// broken across lines, and aligned as on a terminal (numbers right, text left).
pub fn natural(cols: &[Column]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(cols.iter().map(|c| Cell::new(&c.header)));
    for (i, col) in cols.iter().enumerate() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(if col.right {
                CellAlignment::Right
            } else {
                CellAlignment::Left
            });
        }
    }
    let rows = cols.first().map_or(0, |c| c.cells.len());
    for r in 0..rows {
        t.add_row(cols.iter().map(|c| Cell::new(&c.cells[r])));
    }
    t
}

/// `cols` as one table at most `width` wide: columns are left out, highest `drop` first,
/// until the rest fit at their narrowest; then any left out that fit again come back, the
/// most useful first, and the room left goes to the columns that wrap.
pub fn fit(cols: &[Column], width: usize) -> Fitted {
    let mins: Vec<usize> = cols.iter().map(Column::min).collect();
    let mut keep = vec![true; cols.len()];
    let fits =
        |keep: &[bool]| outer(mins.iter().zip(keep).filter(|(_, k)| **k).map(|(m, _)| *m)) <= width;
    let mut order: Vec<usize> = (0..cols.len())
        .filter(|&i| cols[i].drop.is_some())
        .collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cols[i].drop));
    let mut dropped = Vec::new();
    for &i in &order {
        if fits(&keep) {
            break;
        }
        keep[i] = false;
        dropped.push(i);
    }
    for &i in dropped.iter().rev() {
        keep[i] = true;
        if !fits(&keep) {
            keep[i] = false;
        }
    }
    let kept: Vec<usize> = (0..cols.len()).filter(|&i| keep[i]).collect();
    let mut widths: Vec<usize> = kept.iter().map(|&i| mins[i]).collect();
    let mut room = width.saturating_sub(outer(widths.iter().copied()));
    // Headers on one line first, where there is room, then the widest cells.
    for (j, &i) in kept.iter().enumerate() {
        let grow = chars(&cols[i].header).saturating_sub(widths[j]).min(room);
        widths[j] += grow;
        room -= grow;
    }
    while room > 0 {
        let short = (0..kept.len())
            .map(|j| (cols[kept[j]].natural().saturating_sub(widths[j]), j))
            .max();
        match short {
            Some((n, j)) if n > 0 => {
                widths[j] += 1;
                room -= 1;
            }
            _ => break,
        }
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(
        kept.iter()
            .zip(&widths)
            .map(|(&i, &w)| Cell::new(wrap(&cols[i].header, Wrap::Words, w))),
    );
    let rows = cols.iter().map(|c| c.cells.len()).max().unwrap_or(0);
    for r in 0..rows {
        t.add_row(kept.iter().zip(&widths).map(|(&i, &w)| {
            let c = &cols[i];
            Cell::new(wrap(c.cells.get(r).map_or("", String::as_str), c.wrap, w))
        }));
    }
    for (j, &i) in kept.iter().enumerate() {
        if cols[i].right
            && let Some(c) = t.column_mut(j)
        {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    let left_out = (0..cols.len())
        .filter(|&i| !keep[i])
        .map(|i| cols[i].header.clone())
        .collect();
    Fitted { table: t, left_out }
}

/// `key` and `cols` as as few tables at most `width` wide as hold them all, each starting
/// with `key`: for the phase tables, where every column counts.
pub fn split(key: &Column, cols: &[Column], width: usize) -> Vec<Table> {
    let mut tables = Vec::new();
    let mut chunk: Vec<Column> = vec![key.clone()];
    for c in cols {
        let mut with = chunk.clone();
        with.push(c.clone());
        if chunk.len() > 1 && outer(with.iter().map(Column::min)) > width {
            tables.push(fit(&chunk, width).table);
            chunk = vec![key.clone(), c.clone()];
        } else {
            chunk = with;
        }
    }
    if chunk.len() > 1 {
        tables.push(fit(&chunk, width).table);
    }
    tables
}

/// The line under a table that says what was left out, if anything, at most `width` wide.
pub fn left_out_note(left_out: &[String], width: usize) -> Option<String> {
    if left_out.is_empty() {
        return None;
    }
    let text = format!(
        "columns left out at this width: {}; --json has them all",
        left_out.join(", ")
    );
    Some(wrap_prose(&text, "  ", width))
}

/// The parenthesized notes that more than one of `cells` carries (such as what the syscall
/// hooks do for 32-bit processes, which every phase they time repeats), each replaced by a
/// mark, `[1]` for the first: the cells, and the notes in the order of their marks.
pub fn footnotes(cells: Vec<String>) -> (Vec<String>, Vec<String>) {
    let groups: Vec<Vec<&str>> = cells.iter().map(|c| parenthesized(c)).collect();
    let notes: Vec<String> = shared(&groups)
        .iter()
        .map(|g| g[1..g.len() - 1].to_string())
        .collect();
    let cells = cells
        .iter()
        .map(|c| {
            notes.iter().enumerate().fold(c.clone(), |c, (i, n)| {
                c.replace(&format!("({n})"), &format!("[{}]", i + 1))
            })
        })
        .collect();
    (cells, notes)
}

/// The items that more than one of `lists` holds, each once, in the order they first come:
/// what a footnote can say once for all of them.
pub fn shared<'a>(lists: &[Vec<&'a str>]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for item in lists.iter().flatten() {
        let holders = lists.iter().filter(|l| l.contains(item)).count();
        if holders > 1 && !out.contains(item) {
            out.push(item);
        }
    }
    out
}

/// The outermost parenthesized groups of `text`, parentheses included; none where they do
/// not balance.
fn parenthesized(text: &str) -> Vec<&str> {
    let mut groups = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, ch) in text.char_indices() {
        match ch {
            '(' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            ')' => {
                let Some(d) = depth.checked_sub(1) else {
                    return Vec::new();
                };
                depth = d;
                if depth == 0 {
                    groups.push(&text[start..=i]);
                }
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Vec::new();
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_as_short_as_tells_them_apart() {
        let paths = [
            "/usr/bin/cc",
            "/usr/local/bin/cc",
            "/bin/true",
            "./target/debug/fp-workload",
            "/bin/sh",
            "/usr/bin/sh",
        ];
        assert_eq!(
            short_paths(&paths),
            [
                "…/usr/bin/cc",
                "…/local/bin/cc",
                "true",
                "fp-workload",
                "/bin/sh",
                "…/usr/bin/sh"
            ]
        );
    }

    #[test]
    fn wraps_between_pieces_only() {
        assert_eq!(
            wrap("/usr/local/bin/cc", Wrap::Path, 8),
            "/usr/\nlocal/\nbin/cc"
        );
        assert_eq!(wrap("exec_failed", Wrap::Words, 4), "exec_failed");
        assert_eq!(
            wrap("fork 10, posix_spawn 1", Wrap::Items, 10),
            "fork 10,\nposix_spawn 1"
        );
        assert_eq!(
            wrap("spawn cost total", Wrap::Words, 10),
            "spawn cost\ntotal"
        );
    }

    #[test]
    fn leaves_out_the_least_useful_first_and_takes_back_what_fits() {
        let cols = [
            Column::new("name", vec!["a".into()]).left(Wrap::Never),
            Column::new("wide", vec!["x".repeat(30)]).drop(2),
            Column::new("narrow", vec!["1".into()]).drop(1),
        ];
        let f = fit(&cols, 30);
        assert_eq!(f.left_out, ["wide"]);
        let text = f.table.to_string();
        assert!(text.lines().all(|l| chars(l) <= 30), "{text}");
        assert!(text.contains("narrow"), "{text}");
    }

    /// A note that several phases' sources repeat is printed once, under the table; one
    /// that only one source has stays where it is, even twice.
    #[test]
    fn shared_source_notes_become_footnotes() {
        let cells = vec![
            "tracepoint sys_enter_clone + tp_btf task_newtask (32-bit: on demand, none seen)"
                .to_string(),
            "raw_tp page_fault_user (write faults on present pages (from user mode))".into(),
            "tracepoint sys_enter_execve (32-bit: on demand, none seen)".into(),
            "derived: fork + exec".into(),
            "kprobe a (not set) + kprobe b (not set) (32-bit: on demand, none seen)".into(),
        ];
        let (cells, notes) = footnotes(cells);
        // "(not set)" is repeated, but by one source only: it stays.
        assert_eq!(notes, ["32-bit: on demand, none seen"]);
        assert_eq!(
            cells,
            [
                "tracepoint sys_enter_clone + tp_btf task_newtask [1]",
                "raw_tp page_fault_user (write faults on present pages (from user mode))",
                "tracepoint sys_enter_execve [1]",
                "derived: fork + exec",
                "kprobe a (not set) + kprobe b (not set) [1]",
            ]
        );
    }

    /// A piped table aligns as a terminal's does: numbers right, text left.
    #[test]
    fn a_piped_table_aligns_numbers_right_and_text_left() {
        let cols = [
            Column::new("name", vec!["a".into(), "longer".into()]).left(Wrap::Never),
            Column::new("µs", vec!["1.0".into(), "100.0".into()]),
            Column::new("source", vec!["x".into(), "tp y".into()]).left(Wrap::Words),
        ];
        let text = natural(&cols).to_string();
        assert!(text.contains("│ a      ┆   1.0 ┆ x      │"), "{text}");
        assert!(text.contains("│ longer ┆ 100.0 ┆ tp y   │"), "{text}");
    }

    /// What two or more lists hold comes once, in order of first appearance; what one list
    /// holds, even twice, does not come at all (doctor's hooks: one reason or none each).
    #[test]
    fn shared_items_are_those_of_more_than_one_list() {
        let lists = vec![
            vec!["eperm"],
            vec![],
            vec!["enoent"],
            vec!["eperm"],
            vec!["alone", "alone"],
            vec!["enoent"],
        ];
        assert_eq!(shared(&lists), ["eperm", "enoent"]);
    }

    /// Unbalanced parentheses are text, not a note.
    #[test]
    fn unbalanced_parentheses_are_left_alone() {
        assert!(parenthesized("a (b").is_empty());
        assert!(parenthesized("a) (b)").is_empty());
        assert_eq!(parenthesized("a (b (c)) d (e)"), ["(b (c))", "(e)"]);
    }
}
