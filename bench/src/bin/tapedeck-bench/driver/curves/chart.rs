//! Draws one curve as an SVG file with plotters: sizes on a logarithmic x axis (they grow 4× or
//! 10× a step), cost on a linear y axis from zero (so a flat curve looks flat), a legend, and
//! the curve's growth line under the plot.
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// Pixels of one chart.
const SIZE: (u32, u32) = (900, 560);
/// Pixels under the plot for each line of notes.
const NOTE_HEIGHT: u32 = 20;
/// Characters in a line of notes: about what 14 px text fits across the chart.
const NOTE_CHARS: usize = 115;

/// One line of a chart: (size, cost) points in size order.
pub(crate) struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a median beside its solid p99, say).
    pub dashed: bool,
    /// Index into the palette: series that belong together (p50 and p99 of one call) share it.
    pub color: usize,
}

/// A chart: its title, axis labels with units, its series, and lines of text under it.
pub(crate) struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<Series>,
    pub notes: Vec<String>,
}

/// Writes `chart` to `path` as SVG.
///
/// Fails when there is nothing to draw or the file cannot be written.
pub(crate) fn draw(chart: &Chart, path: &Path) -> Result<()> {
    let points = || chart.series.iter().flat_map(|s| s.points.iter().copied());
    let (x_min, x_max) = points().fold((f64::MAX, f64::MIN), |(lo, hi), (x, _)| {
        (lo.min(x), hi.max(x))
    });
    let y_max = points().fold(0.0_f64, |hi, (_, y)| hi.max(y));
    if x_min > x_max || x_min <= 0.0 {
        return Err(anyhow!("{}: no points with a positive size", chart.title));
    }
    let notes: Vec<String> = chart
        .notes
        .iter()
        .flat_map(|n| wrap(n, NOTE_CHARS))
        .collect();
    let notes_height = NOTE_HEIGHT * notes.len() as u32 + 10;
    let size = (SIZE.0, SIZE.1 + notes_height);
    let root = SVGBackend::new(path, size).into_drawing_area();
    let plotted = (|| -> Result<(), Box<dyn std::error::Error>> {
        root.fill(&WHITE)?;
        let (plot, under) = root.split_vertically(SIZE.1);
        // A little room either side, so the end points are not on the frame.
        let x_range = (x_min / 1.3)..(x_max * 1.3);
        let y_top = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
        let mut context = ChartBuilder::on(&plot)
            .caption(chart.title, ("sans-serif", 22))
            .margin(14)
            .x_label_area_size(46)
            .y_label_area_size(72)
            .build_cartesian_2d(x_range.log_scale(), 0.0..y_top)?;
        context
            .configure_mesh()
            .x_desc(chart.x_label)
            .y_desc(chart.y_label)
            .x_label_formatter(&|x| compact(*x))
            .y_label_formatter(&|y| compact(*y))
            .axis_desc_style(("sans-serif", 16))
            // A log axis draws a light line at every minor step: too many to read between.
            .light_line_style(TRANSPARENT)
            .draw()?;
        for series in &chart.series {
            let color = Palette99::pick(series.color).to_rgba();
            let style = color.stroke_width(2);
            let drawn = if series.dashed {
                context.draw_series(DashedLineSeries::new(
                    series.points.iter().copied(),
                    8,
                    5,
                    style,
                ))?
            } else {
                context.draw_series(LineSeries::new(series.points.iter().copied(), style))?
            };
            // A dashed series' legend is two dashes.
            let gap = if series.dashed { 6 } else { 0 };
            drawn.label(series.label.as_str()).legend(move |(x, y)| {
                let style = color.stroke_width(2);
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (10 - gap / 2, 0)], style)
                    + PathElement::new(vec![(10 + gap / 2, 0), (20, 0)], style)
            });
            context.draw_series(
                series
                    .points
                    .iter()
                    .map(|&point| Circle::new(point, 3, color.filled())),
            )?;
        }
        context
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 14))
            .draw()?;
        for (i, note) in notes.iter().enumerate() {
            let at = (16, (NOTE_HEIGHT * i as u32 + 4) as i32);
            under.draw(&Text::new(note.as_str(), at, ("sans-serif", 14)))?;
        }
        root.present()?;
        Ok(())
    })();
    plotted.map_err(|err| anyhow!("drawing {}: {err}", path.display()))
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let (mut lines, mut line) = (Vec::new(), String::new());
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// A number as an axis label: 1.5k, 20k, 1M, 0.25.
fn compact(value: f64) -> String {
    let trim = |text: String| {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    };
    let magnitude = value.abs();
    if magnitude >= 1e6 {
        format!("{}M", trim(format!("{:.2}", value / 1e6)))
    } else if magnitude >= 1e3 {
        format!("{}k", trim(format!("{:.2}", value / 1e3)))
    } else if magnitude >= 10.0 || magnitude == 0.0 {
        format!("{value:.0}")
    } else {
        trim(format!("{value:.3}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_labels() {
        assert_eq!(compact(1_000_000.0), "1M");
        assert_eq!(compact(1_500.0), "1.5k");
        assert_eq!(compact(16.0), "16");
        assert_eq!(compact(0.25), "0.25");
        assert_eq!(compact(0.0), "0");
    }

    #[test]
    fn wraps_between_words() {
        assert_eq!(wrap("aa bb cc", 5), vec!["aa bb", "cc"]);
        assert_eq!(wrap("", 5), vec![""]);
    }

    #[test]
    fn draws_text_without_system_fonts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.svg");
        let chart = Chart {
            title: "cost against size",
            x_label: "size",
            y_label: "cost (ms)",
            series: vec![Series {
                label: "p99".into(),
                points: vec![(10.0, 1.0), (100.0, 2.0), (1000.0, 3.0)],
                dashed: false,
                color: 0,
            }],
            notes: vec!["grows logarithmically".into()],
        };
        draw(&chart, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("<text") && svg.contains("cost against size"));
        assert!(svg.contains("grows logarithmically"));
    }
}
