//! Rendering [`Chart`]s with plotters, generic over the backend so that SVG and PNG come from
//! one drawing routine. The legend goes beneath the plot, one row per series: drawn inside, it
//! hid whatever data lay under it (bars, whiskers, lines near the top).

use super::charts::{BarChart, Chart, LineChart};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Pixel size of the plot (axes, data, title) above the legend.
pub const PLOT_SIZE: (u32, u32) = (1000, 600);
const LEGEND_ROW: u32 = 22;
const LEGEND_PADDING: u32 = 12;
/// The legend's left edge: under the y axis, past its labels.
const LEGEND_LEFT: i32 = 80;

/// Pixel size of `chart` drawn whole: the plot, then a legend as tall as its series need.
pub fn chart_size(chart: &Chart) -> (u32, u32) {
    let rows = legend(chart).len() as u32;
    (PLOT_SIZE.0, PLOT_SIZE.1 + 2 * LEGEND_PADDING + rows * LEGEND_ROW)
}

/// Draws `chart` over the whole of `root`, which is [`chart_size`] big.
pub fn draw_chart<DB: DrawingBackend>(
    chart: &Chart,
    root: &DrawingArea<DB, Shift>,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (plot, below) = root.split_vertically(PLOT_SIZE.1);
    match chart {
        Chart::Lines(c) => draw_lines(c, &plot)?,
        Chart::Bars(c) => draw_bars(c, &plot)?,
    }
    draw_legend(&legend(chart), &below)
}

/// How a legend row shows its series: as the chart draws it.
enum Swatch {
    /// A line and its marker, styled as [`line_style`] and [`marker_style`] say.
    Line {
        color: RGBAColor,
        clean: bool,
    },
    Bar {
        color: RGBAColor,
    },
}

fn legend(chart: &Chart) -> Vec<(&str, Swatch)> {
    match chart {
        Chart::Lines(c) => c
            .series
            .iter()
            .map(|s| {
                let color = Palette99::pick(s.color).to_rgba();
                (s.label.as_str(), Swatch::Line { color, clean: s.clean })
            })
            .collect(),
        Chart::Bars(c) => c
            .series
            .iter()
            .enumerate()
            .map(|(b, s)| (s.label.as_str(), Swatch::Bar { color: Palette99::pick(b).to_rgba() }))
            .collect(),
    }
}

/// Clean accuracy is drawn thin with hollow markers, AdvGLUE thick with filled ones.
fn line_style(color: RGBAColor, clean: bool) -> ShapeStyle {
    color.stroke_width(if clean { 1 } else { 3 })
}

fn marker_style(color: RGBAColor, clean: bool) -> ShapeStyle {
    if clean {
        color.stroke_width(1)
    } else {
        color.filled()
    }
}

fn draw_legend<DB: DrawingBackend>(
    rows: &[(&str, Swatch)],
    area: &DrawingArea<DB, Shift>,
) -> DrawResult<DB> {
    let text =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (label, swatch)) in rows.iter().enumerate() {
        let y = (LEGEND_PADDING + i as u32 * LEGEND_ROW + LEGEND_ROW / 2) as i32;
        let x = LEGEND_LEFT;
        match *swatch {
            Swatch::Line { color, clean } => {
                area.draw(&PathElement::new(vec![(x, y), (x + 28, y)], line_style(color, clean)))?;
                area.draw(&Circle::new((x + 14, y), 4, marker_style(color, clean)))?;
            }
            Swatch::Bar { color } => {
                area.draw(&Rectangle::new([(x + 6, y - 6), (x + 22, y + 6)], color.filled()))?;
            }
        }
        area.draw(&Text::new(label.to_string(), (x + 40, y), text.clone()))?;
    }
    Ok(())
}

fn draw_lines<DB: DrawingBackend>(c: &LineChart, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    let x_max = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5..x_max + 0.5, 0.0..c.y_max.unwrap_or(100.0))?;
    chart
        .configure_mesh()
        .x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        // T is an integer: label whole numbers only.
        .x_label_formatter(&|x| {
            if x.fract().abs() < 1e-9 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| {
            if c.y_max.is_some_and(|m| m < 10.0) {
                format!("{y:.2}")
            } else {
                format!("{y:.0}")
            }
        })
        .draw()?;
    for s in &c.series {
        let color = Palette99::pick(s.color).to_rgba();
        let line = s.points.iter().map(|&(x, y, _)| (x, y));
        chart.draw_series(LineSeries::new(line, line_style(color, s.clean)))?;
        let marker = marker_style(color, s.clean);
        chart.draw_series(s.points.iter().map(|&(x, y, _)| Circle::new((x, y), 4, marker)))?;
        // Whiskers: ± one standard deviation over seeds.
        chart.draw_series(s.points.iter().filter_map(|&(x, y, sd)| {
            sd.map(|sd| PathElement::new(vec![(x, y - sd), (x, y + sd)], color))
        }))?;
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(c: &BarChart, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    let bars = c.series.len().max(1);
    let slot = (bars + 1) as f64; // one bar's width of gap between categories
    let x_max = c.categories.len() as f64 * slot;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..100.0)?;
    // Category names are drawn below the axis by hand: numeric ticks would not land on them.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(c.y_label.as_str())
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (b, s) in c.series.iter().enumerate() {
        let color = Palette99::pick(b).to_rgba();
        let left = |cat: usize| cat as f64 * slot + 0.5 + b as f64;
        chart.draw_series(s.values.iter().enumerate().filter_map(|(cat, v)| {
            v.map(|(mean, _)| {
                Rectangle::new([(left(cat), 0.0), (left(cat) + 1.0, mean)], color.filled())
            })
        }))?;
        chart.draw_series(s.values.iter().enumerate().filter_map(|(cat, v)| {
            let (mean, sd) = (*v)?;
            let x = left(cat) + 0.5;
            sd.map(|sd| PathElement::new(vec![(x, mean - sd), (x, mean + sd)], BLACK))
        }))?;
    }
    let label_style =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (cat, name) in c.categories.iter().enumerate() {
        let center = cat as f64 * slot + 0.5 + bars as f64 / 2.0;
        let (x, y) = chart.backend_coord(&(center, 0.0));
        root.draw(&Text::new(name.clone(), (x, y + 8), label_style.clone()))?;
    }
    Ok(())
}
