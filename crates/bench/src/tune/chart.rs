//! The tune chart: output throughput against each objective's P99 latency, one panel per
//! objective, with the Pareto frontier, the objective's limit and the best configuration.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::sweep::chart::{plot_error, register_font, FONT};
use crate::tune::report::TuneReport;
use crate::tune::slos::TuneSlo;
use crate::tune::trial::Measurement;

const PANEL_SIZE: (u32, u32) = (900, 720);
const MEETS_COLOR: RGBColor = RGBColor(44, 160, 44);
const MISSES_COLOR: RGBColor = RGBColor(150, 150, 150);
const FRONTIER_COLOR: RGBColor = RGBColor(31, 119, 180);
const LIMIT_COLOR: RGBColor = RGBColor(214, 39, 40);
const BEST_COLOR: RGBColor = RGBColor(255, 127, 14);

/// Writes the chart as SVG and PNG.
pub fn draw(report: &TuneReport, svg: &Path, png: &Path) -> anyhow::Result<()> {
    register_font()?;
    let size = (PANEL_SIZE.0 * report.slos.0.len() as u32, PANEL_SIZE.1);
    render(SVGBackend::new(svg, size).into_drawing_area(), report)?;
    render(BitMapBackend::new(png, size).into_drawing_area(), report)
}

fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    report: &TuneReport,
) -> anyhow::Result<()> {
    root.fill(&WHITE).map_err(plot_error)?;
    let title = format!(
        "tune: output throughput against each objective ({} of {} configurations run)",
        report.configurations_run, report.grid_size
    );
    let root = root.titled(&title, (FONT, 24)).map_err(plot_error)?;
    let panels = root.split_evenly((1, report.slos.0.len()));
    for (area, slo) in panels.iter().zip(&report.slos.0) {
        draw_panel(area, report, slo)?;
    }
    root.present().map_err(plot_error)
}

/// A configuration as one point of a panel.
struct Dot<'a> {
    name: &'a str,
    latency: f64,
    throughput: f64,
    meets: bool,
}

fn dots<'a>(report: &'a TuneReport, slo: &TuneSlo) -> Vec<Dot<'a>> {
    report
        .configurations
        .iter()
        .filter_map(|trial| {
            let m: &Measurement = trial.measurement.as_ref().filter(|m| m.completed > 0)?;
            Some(Dot {
                name: &trial.name,
                latency: m.p99_ms(slo.metric),
                throughput: m.output_throughput,
                meets: m.meets_every_slo,
            })
        })
        .collect()
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    report: &TuneReport,
    slo: &TuneSlo,
) -> anyhow::Result<()> {
    let dots = dots(report, slo);
    let x_max = dots.iter().map(|d| d.latency).fold(slo.limit_ms, f64::max) * 1.15;
    let y_max = dots.iter().map(|d| d.throughput).fold(1.0, f64::max) * 1.15;
    let name = slo.metric.name();
    let mut chart = ChartBuilder::on(area)
        .caption(format!("Output throughput against P99 {name}"), (FONT, 22))
        .margin(24)
        .x_label_area_size(60)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc(format!("P99 {name} (ms)"))
        .y_desc("Output tokens per second")
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(plot_error)?;

    let limit_style = LIMIT_COLOR.stroke_width(2);
    chart
        .draw_series(DashedLineSeries::new(
            [(slo.limit_ms, 0.0), (slo.limit_ms, y_max)],
            10,
            6,
            limit_style,
        ))
        .map_err(plot_error)?
        .label(format!("objective: P99 {name} ≤ {} ms", slo.limit_ms))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], limit_style));

    let frontier_names = report.pareto.get(&slo.metric).cloned().unwrap_or_default();
    let frontier: Vec<(f64, f64)> = frontier_names
        .iter()
        .filter_map(|n| dots.iter().find(|d| d.name == n))
        .map(|d| (d.latency, d.throughput))
        .collect();
    let frontier_style = FRONTIER_COLOR.stroke_width(3);
    chart
        .draw_series(LineSeries::new(frontier.clone(), frontier_style))
        .map_err(plot_error)?
        .label("Pareto frontier")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], frontier_style));

    for (meets, label, color) in [
        (true, "meets every objective", MEETS_COLOR),
        (false, "misses an objective", MISSES_COLOR),
    ] {
        let style = if meets {
            color.filled()
        } else {
            color.stroke_width(2)
        };
        chart
            .draw_series(
                dots.iter()
                    .filter(|d| d.meets == meets)
                    .map(|d| Circle::new((d.latency, d.throughput), 6, style)),
            )
            .map_err(plot_error)?
            .label(label)
            .legend(move |(x, y)| Circle::new((x + 12, y), 6, style));
    }

    if let Some(best) = report
        .best
        .as_ref()
        .and_then(|b| dots.iter().find(|d| d.name == b))
    {
        let style = BEST_COLOR.stroke_width(3);
        let label = report
            .best_trial()
            .map_or("", |t| t.flags.as_str())
            .to_owned();
        chart
            .draw_series(std::iter::once(Circle::new(
                (best.latency, best.throughput),
                12,
                style,
            )))
            .map_err(plot_error)?
            .label(format!("best: {label}"))
            .legend(move |(x, y)| Circle::new((x + 12, y), 8, style));
    }

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)
}
