//! Flame graphs of spawn cost: stacks are process ancestry (make;sh;gcc;cc1), widths are
//! the total `spawn_cost` (ns) of the processes with that ancestry. Rendered by inferno.
use std::io::Write;

use anyhow::Result;

use crate::model::Report;

/// Folded stacks: "make;sh;gcc;cc1 123456" per line (needs `Context::folded`).
pub fn folded_lines(report: &Report) -> Vec<String> {
    report
        .folded
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|(stack, total)| format!("{stack} {total}"))
        .collect()
}

pub fn write_folded(report: &Report, out: &mut dyn Write) -> Result<()> {
    for line in folded_lines(report) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

pub fn write_svg(report: &Report, out: &mut dyn Write) -> Result<()> {
    let lines = folded_lines(report);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "forkprof: spawn cost by process ancestry".into();
    opts.count_name = "ns".into();
    if lines.is_empty() {
        // As the folded stacks are an empty file: an image that says so (inferno draws
        // nothing from no stacks, and fails).
        write!(
            out,
            concat!(
                r#"<?xml version="1.0" standalone="no"?>"#,
                r#"<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="64" viewBox="0 0 1200 64">"#,
                r#"<text x="600" y="24" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>"#,
                r#"<text x="600" y="50" text-anchor="middle" font-family="Verdana" font-size="12">nothing to draw: no process in this report has a spawn cost</text>"#,
                "</svg>\n"
            ),
            opts.title
        )?;
        return Ok(());
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No stacks: an image that says so (as the folded stacks are then an empty file), not
    /// an error after a truncated file.
    #[test]
    fn an_empty_report_draws_a_note() {
        let ctx = crate::model::report::Context {
            folded: true,
            ..crate::model::report::Context::for_run(&|_| false)
        };
        let report = Report::build(&crate::model::Trace::default(), &ctx);
        let mut svg = Vec::new();
        write_svg(&report, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(
            svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        assert!(svg.contains("nothing to draw"), "{svg}");
    }
}
