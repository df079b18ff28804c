//! Rendering [`Chart`]s with plotters, generic over the backend so that SVG and PNG come from
//! one drawing routine.

use super::charts::{BarChart, Chart, LineChart};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws `chart` over the whole of `root`.
pub fn draw_chart<DB: DrawingBackend>(
    chart: &Chart,
    root: &DrawingArea<DB, Shift>,
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    match chart {
        Chart::Lines(c) => draw_lines(c, root),
        Chart::Bars(c) => draw_bars(c, root),
    }
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
        let style = color.stroke_width(if s.clean { 1 } else { 3 });
        chart
            .draw_series(LineSeries::new(s.points.iter().map(|&(x, y, _)| (x, y)), style))?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        let marker = |(x, y): (f64, f64)| {
            if s.clean {
                Circle::new((x, y), 4, color.stroke_width(1))
            } else {
                Circle::new((x, y), 4, color.filled())
            }
        };
        chart.draw_series(s.points.iter().map(|&(x, y, _)| marker((x, y))))?;
        // Whiskers: ± one standard deviation over seeds.
        chart.draw_series(s.points.iter().filter_map(|&(x, y, sd)| {
            sd.map(|sd| PathElement::new(vec![(x, y - sd), (x, y + sd)], color))
        }))?;
    }
    // Accuracies fall to the right less often than they rise; other measures (drift) may not.
    let legend = if c.y_max.is_some() {
        SeriesLabelPosition::UpperLeft
    } else {
        SeriesLabelPosition::LowerRight
    };
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
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
        chart
            .draw_series(s.values.iter().enumerate().filter_map(|(cat, v)| {
                v.map(|(mean, _)| {
                    Rectangle::new([(left(cat), 0.0), (left(cat) + 1.0, mean)], color.filled())
                })
            }))?
            .label(s.label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}
