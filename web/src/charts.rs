//! Chart geometry: data in, SVG coordinates and path strings out. The page renders them with
//! leptos' `view!`; keeping the maths here makes it testable natively and keeps the page free of
//! a JavaScript chart library.

/// A line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// CSS class giving the colour (`bert`, `ex`, `im`).
    pub class: &'static str,
    pub dashed: bool,
    pub points: Vec<(f32, f32)>,
}

/// A plot area with its axes' ranges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame {
    pub width: f32,
    pub height: f32,
    /// Space left of and below the plot area, for tick labels.
    pub left: f32,
    pub bottom: f32,
    pub x: (f32, f32),
    pub y: (f32, f32),
    /// Log10 y axis (residuals fall by orders of magnitude).
    pub log_y: bool,
}

pub const TOP: f32 = 10.0;
pub const RIGHT: f32 = 10.0;

impl Frame {
    /// A frame whose ranges cover every point of `series` (y from 0 on a linear axis).
    pub fn fit(width: f32, height: f32, series: &[Series], log_y: bool) -> Frame {
        let points = series.iter().flat_map(|s| s.points.iter().copied());
        let finite: Vec<(f32, f32)> = points
            .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_y || *y > 0.0))
            .collect();
        let (mut x0, mut x1) = min_max(finite.iter().map(|p| p.0)).unwrap_or((0.0, 1.0));
        let (mut y0, mut y1) = if log_y {
            min_max(finite.iter().map(|p| p.1.log10()))
                .map(|(a, b)| (a.floor(), b.ceil()))
                .unwrap_or((-1.0, 0.0))
        } else {
            (0.0, min_max(finite.iter().map(|p| p.1)).map_or(1.0, |(_, b)| b.max(0.0) * 1.1))
        };
        if x1 <= x0 {
            (x0, x1) = (x0 - 0.5, x0 + 0.5);
        }
        if y1 <= y0 {
            (y0, y1) = (y0, y0 + 1.0);
        }
        Frame { width, height, left: 46.0, bottom: 28.0, x: (x0, x1), y: (y0, y1), log_y }
    }

    pub fn px(&self, x: f32) -> f32 {
        self.left + (x - self.x.0) / (self.x.1 - self.x.0) * (self.width - self.left - RIGHT)
    }

    pub fn py(&self, y: f32) -> f32 {
        let v = if self.log_y { y.max(f32::MIN_POSITIVE).log10() } else { y };
        let plot = self.height - self.bottom - TOP;
        TOP + plot - (v - self.y.0) / (self.y.1 - self.y.0) * plot
    }

    /// SVG path data of a series; non-finite points (and non-positive ones on a log axis) break
    /// the line instead of drawing it to infinity.
    pub fn path(&self, points: &[(f32, f32)]) -> String {
        let mut d = String::new();
        let mut pen_down = false;
        for &(x, y) in points {
            if !x.is_finite() || !y.is_finite() || (self.log_y && y <= 0.0) {
                pen_down = false;
                continue;
            }
            d.push_str(&format!(
                "{}{:.1} {:.1} ",
                if pen_down { "L" } else { "M" },
                self.px(x),
                self.py(y)
            ));
            pen_down = true;
        }
        d.trim_end().to_string()
    }

    /// Integer x ticks (layers, iterations), at most `max` of them.
    pub fn x_ticks(&self, max: usize) -> Vec<f32> {
        let (lo, hi) = (self.x.0.ceil() as i64, self.x.1.floor() as i64);
        let step = ((hi - lo) as usize / max.max(1) + 1) as i64;
        (lo..=hi).step_by(step as usize).map(|v| v as f32).collect()
    }

    /// y ticks with their labels: decades on a log axis, five even steps otherwise.
    pub fn y_ticks(&self) -> Vec<(f32, String)> {
        if self.log_y {
            let (lo, hi) = (self.y.0 as i32, self.y.1 as i32);
            let step = ((hi - lo) / 5 + 1) as usize;
            (lo..=hi).step_by(step).map(|e| (10f32.powi(e), format!("1e{e}"))).collect()
        } else {
            (0..=4)
                .map(|i| {
                    let v = self.y.0 + (self.y.1 - self.y.0) * i as f32 / 4.0;
                    (v, format_tick(v))
                })
                .collect()
        }
    }
}

fn format_tick(v: f32) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else if v.abs() >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.0e}")
    }
}

fn min_max(values: impl Iterator<Item = f32>) -> Option<(f32, f32)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((a, b)) => Some((a.min(v), b.max(v))),
    })
}

/// Points `(index, value)` of a per-layer or per-iteration list.
pub fn indexed(values: &[f32]) -> Vec<(f32, f32)> {
    values.iter().enumerate().map(|(i, v)| (i as f32, *v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: Vec<(f32, f32)>) -> Series {
        Series { name: "s".into(), class: "im", dashed: false, points }
    }

    #[test]
    fn linear_frame_maps_the_data_into_the_plot_area() {
        let s = [series(vec![(0.0, 0.0), (6.0, 2.0)])];
        let f = Frame::fit(300.0, 200.0, &s, false);
        assert_eq!(f.px(0.0), f.left);
        assert_eq!(f.px(6.0), 300.0 - RIGHT);
        assert_eq!(f.py(0.0), 200.0 - f.bottom);
        assert!(f.py(2.0) > TOP && f.py(2.0) < f.py(1.0), "y grows upwards, with headroom");
        assert_eq!(
            f.path(&s[0].points),
            format!("M{:.1} {:.1} L{:.1} {:.1}", f.px(0.0), f.py(0.0), f.px(6.0), f.py(2.0))
        );
    }

    #[test]
    fn log_frame_spans_whole_decades_and_breaks_on_zero() {
        let s = [series(vec![(0.0, 50.0), (1.0, 0.02), (2.0, 0.0), (3.0, 0.001)])];
        let f = Frame::fit(300.0, 200.0, &s, true);
        assert_eq!(f.y, (-3.0, 2.0));
        let d = f.path(&s[0].points);
        assert_eq!(d.matches('M').count(), 2, "the zero residual breaks the line: {d}");
        let labels: Vec<String> = f.y_ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels.first().map(String::as_str), Some("1e-3"));
    }

    #[test]
    fn empty_and_flat_data_still_give_a_valid_frame() {
        let f = Frame::fit(300.0, 200.0, &[], false);
        assert!(f.x.1 > f.x.0 && f.y.1 > f.y.0);
        let f = Frame::fit(300.0, 200.0, &[series(vec![(2.0, 0.0)])], false);
        assert!(f.x.1 > f.x.0 && f.y.1 > f.y.0);
        assert!(f.px(2.0).is_finite() && f.py(0.0).is_finite());
        assert_eq!(f.path(&[(f32::NAN, 1.0)]), "");
    }

    #[test]
    fn ticks_are_integers_within_the_range() {
        let f = Frame::fit(300.0, 200.0, &[series(indexed(&[1.0; 16]))], false);
        let t = f.x_ticks(8);
        assert_eq!(t.first(), Some(&0.0));
        assert!(t.len() <= 9 && t.iter().all(|v| v.fract() == 0.0 && *v <= 15.0));
    }
}
