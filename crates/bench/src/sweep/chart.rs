//! The sweep chart: server throughput and one user's latency against load, as SVG and PNG,
//! for one server's sweep or for several servers side by side; and, for runs that mixed short
//! and long prompts, the chart of TTFT per prompt-length class.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::sweep::comparison::Comparison;
use crate::sweep::summary::{Spread, SweepAxis, SweepSummary};

const SIZE: (u32, u32) = (1600, 720);
pub(crate) const FONT: &str = "sans-serif";
const THROUGHPUT_COLOR: RGBColor = RGBColor(31, 119, 180);
const TTFT_COLOR: RGBColor = RGBColor(214, 39, 40);
const TPOT_COLOR: RGBColor = RGBColor(44, 160, 44);
/// One color per server of a comparison (matplotlib's first ones), repeated past the last.
const SERVER_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
const CLASS_SIZE: (u32, u32) = (1200, 720);
const SHORT_COLOR: RGBColor = RGBColor(31, 119, 180);
const LONG_COLOR: RGBColor = RGBColor(214, 39, 40);
const BAND_NOTE: &str = "lines: median run, bands: lowest to highest run";

/// One metric's line: the median per level, and a band from the lowest to the highest run.
struct Series {
    name: String,
    color: RGBColor,
    /// Tells TPOT from TTFT where a comparison draws both in one server's color.
    dashed: bool,
    points: Vec<(f64, Spread)>,
}

impl Series {
    fn of(summary: &SweepSummary, name: String, color: RGBColor, metric: &str) -> Self {
        Series {
            name,
            color,
            dashed: false,
            points: summary
                .levels
                .iter()
                .map(|l| (l.level, l.spread(metric)))
                .collect(),
        }
    }

    fn dashed(self) -> Self {
        Series {
            dashed: true,
            ..self
        }
    }
}

/// Everything one chart shows: its title, the levels and each panel's lines.
struct ChartContent {
    title: String,
    axis: SweepAxis,
    levels: Vec<f64>,
    throughput: Vec<Series>,
    latency: Vec<Series>,
}

impl ChartContent {
    fn of_sweep(summary: &SweepSummary) -> Self {
        ChartContent {
            title: format!(
                "{} — {} runs per level ({BAND_NOTE})",
                summary.model_id, summary.runs_per_level
            ),
            axis: summary.axis,
            levels: summary.levels.iter().map(|l| l.level).collect(),
            throughput: vec![Series::of(
                summary,
                "Server output tokens per second".into(),
                THROUGHPUT_COLOR,
                "output_throughput",
            )],
            latency: vec![
                Series::of(
                    summary,
                    "Time to first token (TTFT)".into(),
                    TTFT_COLOR,
                    "median_ttft_ms",
                ),
                Series::of(
                    summary,
                    "Time per output token (TPOT)".into(),
                    TPOT_COLOR,
                    "median_tpot_ms",
                ),
            ],
        }
    }

    /// One color per server; in the latency panel its TTFT is solid and its TPOT dashed.
    fn of_comparison(comparison: &Comparison) -> Self {
        let names: Vec<&str> = comparison.servers.iter().map(|s| s.name.as_str()).collect();
        let first = &comparison.servers[0].summary;
        let mut content = ChartContent {
            title: format!(
                "{} — {} runs per level ({BAND_NOTE})",
                names.join(" vs "),
                comparison.runs_per_level
            ),
            axis: comparison.axis,
            levels: first.levels.iter().map(|l| l.level).collect(),
            throughput: Vec::new(),
            latency: Vec::new(),
        };
        for (index, server) in comparison.servers.iter().enumerate() {
            let (summary, name) = (&server.summary, &server.name);
            let color = SERVER_COLORS[index % SERVER_COLORS.len()];
            content.throughput.push(Series::of(
                summary,
                name.clone(),
                color,
                "output_throughput",
            ));
            content.latency.push(Series::of(
                summary,
                format!("{name}: time to first token (TTFT)"),
                color,
                "median_ttft_ms",
            ));
            content.latency.push(
                Series::of(
                    summary,
                    format!("{name}: time per output token (TPOT)"),
                    color,
                    "median_tpot_ms",
                )
                .dashed(),
            );
        }
        content
    }
}

/// The per-class chart's content: one panel of TTFT against load.
struct ClassChart {
    title: String,
    axis: SweepAxis,
    levels: Vec<f64>,
    lines: Vec<Series>,
}

impl ClassChart {
    /// Short prompts' median TTFT (solid) and worst TTFT (dashed), long prompts' median TTFT.
    fn of_sweep(summary: &SweepSummary) -> Self {
        ClassChart {
            title: format!(
                "{} — TTFT by prompt length, {} runs per level ({BAND_NOTE})",
                summary.model_id, summary.runs_per_level
            ),
            axis: summary.axis,
            levels: summary.levels.iter().map(|l| l.level).collect(),
            lines: vec![
                Series::of(
                    summary,
                    "Short prompts: median TTFT".into(),
                    SHORT_COLOR,
                    "ttft_by_class.short.median_ms",
                ),
                Series::of(
                    summary,
                    "Short prompts: worst TTFT".into(),
                    SHORT_COLOR,
                    "ttft_by_class.short.max_ms",
                )
                .dashed(),
                Series::of(
                    summary,
                    "Long prompts: median TTFT".into(),
                    LONG_COLOR,
                    "ttft_by_class.long.median_ms",
                ),
            ],
        }
    }

    /// One color per server: its short prompts' median TTFT solid, its long prompts' dashed.
    fn of_comparison(comparison: &Comparison) -> Self {
        let names: Vec<&str> = comparison.servers.iter().map(|s| s.name.as_str()).collect();
        let first = &comparison.servers[0].summary;
        let mut lines = Vec::new();
        for (index, server) in comparison.servers.iter().enumerate() {
            let (summary, name) = (&server.summary, &server.name);
            let color = SERVER_COLORS[index % SERVER_COLORS.len()];
            lines.push(Series::of(
                summary,
                format!("{name}: short prompts' median TTFT"),
                color,
                "ttft_by_class.short.median_ms",
            ));
            lines.push(
                Series::of(
                    summary,
                    format!("{name}: long prompts' median TTFT"),
                    color,
                    "ttft_by_class.long.median_ms",
                )
                .dashed(),
            );
        }
        ClassChart {
            title: format!(
                "{} — TTFT by prompt length, {} runs per level ({BAND_NOTE})",
                names.join(" vs "),
                comparison.runs_per_level
            ),
            axis: comparison.axis,
            levels: first.levels.iter().map(|l| l.level).collect(),
            lines,
        }
    }
}

/// Writes the TTFT-per-class chart of one sweep as SVG and PNG.
pub fn draw_by_class(summary: &SweepSummary, svg: &Path, png: &Path) -> anyhow::Result<()> {
    draw_class_chart(&ClassChart::of_sweep(summary), svg, png)
}

/// Writes the TTFT-per-class chart of several servers' sweeps as SVG and PNG.
pub fn draw_comparison_by_class(
    comparison: &Comparison,
    svg: &Path,
    png: &Path,
) -> anyhow::Result<()> {
    draw_class_chart(&ClassChart::of_comparison(comparison), svg, png)
}

fn draw_class_chart(content: &ClassChart, svg: &Path, png: &Path) -> anyhow::Result<()> {
    register_font()?;
    render_classes(
        SVGBackend::new(svg, CLASS_SIZE).into_drawing_area(),
        content,
    )?;
    render_classes(
        BitMapBackend::new(png, CLASS_SIZE).into_drawing_area(),
        content,
    )
}

fn render_classes<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    content: &ClassChart,
) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(plot_error)?;
    let root = root
        .titled(&content.title, (FONT, 22))
        .map_err(plot_error)?;
    let x_title = format!("{} (log scale)", content.axis.title());
    let y_range = positive_range(
        content
            .lines
            .iter()
            .flat_map(|s| s.points.iter().flat_map(|(_, p)| [p.min, p.max])),
    );
    let y_ticks = one_two_five_ticks(&y_range);
    let panel = Panel {
        caption: "Time to first token by prompt length",
        x_title: &x_title,
        y_title: "Milliseconds (log scale)",
        levels: &content.levels,
        lines: &content.lines,
    };
    panel.draw(&root, y_range.log_scale().with_key_points(y_ticks))?;
    root.present().map_err(plot_error)
}

/// Writes one sweep's chart as SVG and PNG.
pub fn draw(summary: &SweepSummary, svg: &Path, png: &Path) -> anyhow::Result<()> {
    draw_content(&ChartContent::of_sweep(summary), svg, png)
}

/// Writes the chart of several servers' sweeps as SVG and PNG.
pub fn draw_comparison(comparison: &Comparison, svg: &Path, png: &Path) -> anyhow::Result<()> {
    draw_content(&ChartContent::of_comparison(comparison), svg, png)
}

fn draw_content(content: &ChartContent, svg: &Path, png: &Path) -> anyhow::Result<()> {
    register_font()?;
    render(SVGBackend::new(svg, SIZE).into_drawing_area(), content)?;
    render(BitMapBackend::new(png, SIZE).into_drawing_area(), content)
}

/// The PNG has no system fonts to lean on, so a font travels inside the binary.
pub(crate) fn register_font() -> anyhow::Result<()> {
    static REGISTER: Once = Once::new();
    let mut result = Ok(());
    REGISTER.call_once(|| {
        let bytes = include_bytes!("../../assets/DejaVuSans.ttf");
        result = plotters::style::register_font(FONT, FontStyle::Normal, bytes)
            .map_err(|_| anyhow::anyhow!("the embedded chart font is unreadable"));
    });
    result
}

pub(crate) fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the chart: {error}")
}

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    content: &ChartContent,
) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(plot_error)?;
    let root = root
        .titled(&content.title, (FONT, 26))
        .map_err(plot_error)?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    let x_title = format!("{} (log scale)", content.axis.title());
    let y_max = content
        .throughput
        .iter()
        .flat_map(|s| s.points.iter().map(|(_, p)| p.max))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.15;
    let throughput = Panel {
        caption: "Server throughput",
        x_title: &x_title,
        y_title: "Output tokens per second",
        levels: &content.levels,
        lines: &content.throughput,
    };
    throughput.draw(&left, 0.0..y_max)?;
    let y_range = positive_range(
        content
            .latency
            .iter()
            .flat_map(|s| s.points.iter().flat_map(|(_, p)| [p.min, p.max])),
    );
    let y_ticks = one_two_five_ticks(&y_range);
    let latency = Panel {
        caption: "One user's median latency",
        x_title: &x_title,
        y_title: "Milliseconds (log scale)",
        levels: &content.levels,
        lines: &content.latency,
    };
    latency.draw(&right, y_range.log_scale().with_key_points(y_ticks))?;
    root.present().map_err(plot_error)
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

/// One half of the chart: its texts, the measured levels and its lines.
struct Panel<'a> {
    caption: &'a str,
    x_title: &'a str,
    y_title: &'a str,
    levels: &'a [f64],
    lines: &'a [Series],
}

impl Panel<'_> {
    fn draw<DB, Y>(&self, area: &DrawingArea<DB, Shift>, y_range: Y) -> anyhow::Result<()>
    where
        DB: DrawingBackend,
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let x_range = positive_range(self.levels.iter().copied());
        // Ticks at the measured levels rather than at powers of ten.
        let x_ticks = self.levels.to_vec();
        let mut chart = ChartBuilder::on(area)
            .caption(self.caption, (FONT, 24))
            .margin(24)
            .x_label_area_size(60)
            .y_label_area_size(90)
            .build_cartesian_2d(x_range.log_scale().with_key_points(x_ticks), y_range)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(self.x_title)
            .y_desc(self.y_title)
            .label_style((FONT, 18))
            .axis_desc_style((FONT, 20))
            .x_label_formatter(&|x| format_level(*x))
            .y_label_formatter(&|y| format_value(*y))
            .y_labels(12)
            .draw()
            .map_err(plot_error)?;
        for line in self.lines {
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
}

fn draw_line<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    line: &Series,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
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
    let medians = line.points.iter().map(|(x, s)| (*x, s.median));
    let style = color.stroke_width(3);
    let drawn = if line.dashed {
        chart.draw_series(DashedLineSeries::new(medians, 12, 8, style))
    } else {
        chart.draw_series(LineSeries::new(medians, style))
    };
    // The legend's stroke: two pieces with a gap for a dashed line, touching for a solid one.
    let gap = if line.dashed { 6 } else { 0 };
    drawn
        .map_err(plot_error)?
        .label(line.name.as_str())
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (9, 0)], style)
                + PathElement::new(vec![(9 + gap, 0), (24, 0)], style)
        });
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
