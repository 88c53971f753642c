//! The sweep chart: server throughput and one user's latency against load, as SVG and PNG.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::sweep_summary::{Spread, SweepSummary};

const SIZE: (u32, u32) = (1600, 720);
const FONT: &str = "sans-serif";
const THROUGHPUT_COLOR: RGBColor = RGBColor(31, 119, 180);
const TTFT_COLOR: RGBColor = RGBColor(214, 39, 40);
const TPOT_COLOR: RGBColor = RGBColor(44, 160, 44);

/// One metric's line: the median per level, and a band from the lowest to the highest run.
struct Series {
    name: &'static str,
    color: RGBColor,
    points: Vec<(f64, Spread)>,
}

/// Writes the chart as SVG and PNG.
pub fn draw(summary: &SweepSummary, svg: &Path, png: &Path) -> anyhow::Result<()> {
    register_font()?;
    render(SVGBackend::new(svg, SIZE).into_drawing_area(), summary)?;
    render(BitMapBackend::new(png, SIZE).into_drawing_area(), summary)
}

/// The PNG has no system fonts to lean on, so a font travels inside the binary.
fn register_font() -> anyhow::Result<()> {
    static REGISTER: Once = Once::new();
    let mut result = Ok(());
    REGISTER.call_once(|| {
        let bytes = include_bytes!("../assets/DejaVuSans.ttf");
        result = plotters::style::register_font(FONT, FontStyle::Normal, bytes)
            .map_err(|_| anyhow::anyhow!("the embedded chart font is unreadable"));
    });
    result
}

fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the chart: {error}")
}

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    summary: &SweepSummary,
) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(plot_error)?;
    let title = format!(
        "{} — {} runs per level (lines: median run, bands: lowest to highest run)",
        summary.model_id, summary.runs_per_level
    );
    let root = root.titled(&title, (FONT, 26)).map_err(plot_error)?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    let x_title = format!("{} (log scale)", summary.axis.title());
    let throughput = series(
        summary,
        "Server output tokens per second",
        THROUGHPUT_COLOR,
        "output_throughput",
    );
    let y_max = throughput
        .points
        .iter()
        .map(|(_, s)| s.max)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.15;
    panel(
        &left,
        "Server throughput",
        &x_title,
        "Output tokens per second",
        0.0..y_max,
        &[throughput],
        summary,
    )?;
    let latency = [
        series(
            summary,
            "Time to first token (TTFT)",
            TTFT_COLOR,
            "median_ttft_ms",
        ),
        series(
            summary,
            "Time per output token (TPOT)",
            TPOT_COLOR,
            "median_tpot_ms",
        ),
    ];
    let y_range = positive_range(
        latency
            .iter()
            .flat_map(|s| s.points.iter().flat_map(|(_, p)| [p.min, p.max])),
    );
    let y_ticks = one_two_five_ticks(&y_range);
    let y_axis = y_range.log_scale().with_key_points(y_ticks);
    panel(
        &right,
        "One user's median latency",
        &x_title,
        "Milliseconds (log scale)",
        y_axis,
        &latency,
        summary,
    )?;
    root.present().map_err(plot_error)
}

fn series(summary: &SweepSummary, name: &'static str, color: RGBColor, metric: &str) -> Series {
    Series {
        name,
        color,
        points: summary
            .levels
            .iter()
            .map(|l| (l.level, l.spread(metric)))
            .collect(),
    }
}

/// A range around positive values with some air, for log axes (which cannot show zero).
fn positive_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let positive: Vec<f64> = values.filter(|v| *v > 0.0).collect();
    let low = positive.iter().copied().fold(f64::INFINITY, f64::min);
    let high = positive.iter().copied().fold(0.0, f64::max);
    if positive.is_empty() {
        return 0.1..10.0;
    }
    (low / 1.5)..(high * 1.5)
}

fn panel<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    x_title: &str,
    y_title: &str,
    y_range: Y,
    lines: &[Series],
    summary: &SweepSummary,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let x_range = positive_range(summary.levels.iter().map(|l| l.level));
    // Ticks at the measured levels rather than at powers of ten.
    let x_ticks: Vec<f64> = summary.levels.iter().map(|l| l.level).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 24))
        .margin(24)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(x_range.log_scale().with_key_points(x_ticks), y_range)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc(x_title)
        .y_desc(y_title)
        .label_style((FONT, 18))
        .axis_desc_style((FONT, 20))
        .x_label_formatter(&|x| format_level(*x))
        .y_label_formatter(&|y| format_value(*y))
        .y_labels(12)
        .draw()
        .map_err(plot_error)?;
    for line in lines {
        draw_line(&mut chart, line)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 18))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)
}

fn draw_line<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    line: &Series,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let color = line.color;
    let band: Vec<(f64, f64)> = line
        .points
        .iter()
        .map(|(x, s)| (*x, s.max))
        .chain(line.points.iter().rev().map(|(x, s)| (*x, s.min)))
        .collect();
    chart
        .draw_series(std::iter::once(Polygon::new(band, color.mix(0.18))))
        .map_err(plot_error)?;
    chart
        .draw_series(LineSeries::new(
            line.points.iter().map(|(x, s)| (*x, s.median)),
            color.stroke_width(3),
        ))
        .map_err(plot_error)?
        .label(line.name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3)));
    chart
        .draw_series(
            line.points
                .iter()
                .map(|(x, s)| Circle::new((*x, s.median), 5, color.filled())),
        )
        .map_err(plot_error)?;
    Ok(())
}

/// Ticks at 1, 2 and 5 times powers of ten: a log axis spanning less than a decade otherwise
/// shows few or no labels.
fn one_two_five_ticks(range: &std::ops::Range<f64>) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(range.start.log10().floor());
    while decade <= range.end {
        for step in [1.0, 2.0, 5.0] {
            let tick = decade * step;
            if range.contains(&tick) {
                ticks.push(tick);
            }
        }
        decade *= 10.0;
    }
    ticks
}

fn format_value(value: f64) -> String {
    if value.abs() >= 10.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn format_level(level: f64) -> String {
    if level >= 1.0 && level.fract() == 0.0 {
        format!("{level:.0}")
    } else {
        format!("{level:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_follow_one_two_five_inside_the_range() {
        assert_eq!(
            one_two_five_ticks(&(4.0..80.0)),
            vec![5.0, 10.0, 20.0, 50.0]
        );
        assert_eq!(one_two_five_ticks(&(0.3..1.5)), vec![0.5, 1.0]);
    }
}
