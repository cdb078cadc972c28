//! The report's charts as SVG text (plotters' SVG backend: no fonts, images or scripts, and
//! every text it draws is escaped).
//!
//! The reliability diagram of one model: per non-empty bin, the observed rate against the mean
//! prediction with its Wilson interval as a band over the bin's width, the diagonal of perfect
//! calibration, bins with fewer than [`FEW_ROWS`] rows in grey, and under it the prediction
//! histogram (rows per bin, log scale). On a log-odds axis CTR-sized probabilities spread out
//! instead of crowding the corner of [0, 1]. The over-time charts are `calibsql plot metric`'s
//! ([`crate::plot::metric::metric_svg`]).

use plotters::coord::Shift;
use plotters::prelude::*;

use super::data::{Bin, ModelData};
use super::Axis;
use crate::plot::metric::{metric_svg, Point, Series};
use crate::plot::{compact_count, drawing, house_legend, house_mesh, nice_upper, Strategy};

/// Bins with fewer rows are drawn in grey: their observed rate says little.
pub const FEW_ROWS: i64 = 100;
/// [`Axis::Auto`] draws log-odds when every bin's mean prediction is below this.
pub const LOG_ODDS_BELOW: f64 = 0.2;
/// The smallest probability a log-odds axis shows (observed rates of 0 sit on its edge).
const LOG_ODDS_FLOOR: f64 = 1e-5;

const SIZE: (u32, u32) = (560, 500);
const RATE: RGBColor = RGBColor(31, 119, 180);
const FEW: RGBColor = RGBColor(160, 160, 160);
const DIAGONAL: RGBColor = RGBColor(90, 90, 90);
const COUNTS: RGBColor = RGBColor(120, 120, 120);

/// Whether `axis` means log-odds for these bins.
pub fn uses_log_odds(axis: Axis, bins: &[Bin]) -> bool {
    match axis {
        Axis::Linear => false,
        Axis::LogOdds => true,
        Axis::Auto => {
            let means: Vec<f64> = bins.iter().filter_map(|b| b.mean_p).collect();
            !means.is_empty() && means.iter().all(|&m| m < LOG_ODDS_BELOW)
        }
    }
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(LOG_ODDS_FLOOR, 1.0 - LOG_ODDS_FLOOR);
    (p / (1.0 - p)).ln()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// A probability as a short label (`0.001`, `0.25`).
fn probability_label(p: f64) -> String {
    if p <= 0.0 {
        return "0".to_string();
    }
    let digits = (-p.log10().floor()).max(0.0) as usize + 1;
    let text = format!("{p:.digits$}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The reliability diagram of `model` (`None` when it has no non-empty bin).
pub fn reliability_svg(
    model: &ModelData,
    strategy: Strategy,
    axis: Axis,
) -> anyhow::Result<Option<String>> {
    let filled: Vec<&Bin> = model
        .reliability
        .iter()
        .filter(|b| b.count > 0 && b.mean_p.is_some() && b.frac_pos.is_some())
        .collect();
    if filled.is_empty() {
        return Ok(None);
    }
    let log_odds = uses_log_odds(axis, &model.reliability);
    let to_axis = move |p: f64| if log_odds { logit(p) } else { p };
    // The range the bins' means, rates and intervals span.
    let values: Vec<f64> = filled
        .iter()
        .flat_map(|b| [b.mean_p, b.frac_pos, b.frac_pos_lower, b.frac_pos_upper])
        .flatten()
        .collect();
    let (lo, hi) = if log_odds {
        let positive = values.iter().copied().filter(|&v| v > 0.0);
        let lo = positive.fold(f64::INFINITY, f64::min).min(0.5);
        let hi = values.iter().copied().fold(0.0, f64::max);
        let (lo, hi) = (logit(lo) - 0.3, logit(hi.max(lo)) + 0.3);
        (lo, hi.max(lo + 1.0))
    } else {
        match strategy {
            Strategy::Uniform => (0.0, 1.0),
            Strategy::Quantile => (
                0.0,
                nice_upper(1.05 * values.iter().copied().fold(0.0, f64::max)),
            ),
        }
    };
    let span = |b: &Bin| -> (f64, f64) {
        let mean = to_axis(b.mean_p.unwrap_or(0.0));
        let lower = b.lower.map(to_axis).unwrap_or(mean).clamp(lo, hi);
        let upper = b.upper.map(to_axis).unwrap_or(mean).clamp(lo, hi);
        if upper - lower < (hi - lo) * 0.004 {
            (mean - (hi - lo) * 0.004, mean + (hi - lo) * 0.004)
        } else {
            (lower, upper)
        }
    };
    let label = move |v: &f64| {
        if log_odds {
            probability_label(sigmoid(*v))
        } else {
            format!("{v:.2}")
        }
    };
    let x_desc = if log_odds {
        "mean predicted probability (log-odds scale)"
    } else {
        "mean predicted probability"
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let (top, bottom) = root.split_vertically(SIZE.1 - 130);
        draw_rates(&top, &filled, (lo, hi), &span, &to_axis, &label)?;
        draw_counts(&bottom, &filled, (lo, hi), &span, &label, x_desc)?;
        root.present().map_err(drawing)?;
    }
    Ok(Some(svg))
}

fn draw_rates<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    filled: &[&Bin],
    (lo, hi): (f64, f64),
    span: &dyn Fn(&Bin) -> (f64, f64),
    to_axis: &dyn Fn(f64) -> f64,
    label: &dyn Fn(&f64) -> String,
) -> anyhow::Result<()> {
    let mut chart = ChartBuilder::on(area)
        .margin_top(10)
        .margin_left(8)
        .margin_right(16)
        .x_label_area_size(18)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, lo..hi)
        .map_err(drawing)?;
    house_mesh(&mut chart)
        .x_labels(7)
        .y_labels(7)
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(label)
        .y_desc("observed rate (95% Wilson band)")
        .draw()
        .map_err(drawing)?;
    let color = |b: &Bin| if b.count < FEW_ROWS { FEW } else { RATE };
    chart
        .draw_series(filled.iter().filter_map(|b| {
            let (l, u) = span(b);
            let (bl, bu) = (b.frac_pos_lower?, b.frac_pos_upper?);
            Some(Rectangle::new(
                [
                    (l, to_axis(bl).clamp(lo, hi)),
                    (u, to_axis(bu).clamp(lo, hi)),
                ],
                color(b).mix(0.22).filled(),
            ))
        }))
        .map_err(drawing)?
        .label("95% Wilson interval of the observed rate")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], RATE.mix(0.22).filled()));
    chart
        .draw_series(LineSeries::new(
            filled.iter().map(|b| {
                (
                    to_axis(b.mean_p.unwrap_or(0.0)),
                    to_axis(b.frac_pos.unwrap_or(0.0)),
                )
            }),
            RATE.mix(0.6).stroke_width(1),
        ))
        .map_err(drawing)?;
    chart
        .draw_series(filled.iter().map(|b| {
            let at = (
                to_axis(b.mean_p.unwrap_or(0.0)),
                to_axis(b.frac_pos.unwrap_or(0.0)).clamp(lo, hi),
            );
            Circle::new(at, 4, color(b).filled())
        }))
        .map_err(drawing)?
        .label("observed rate per bin")
        .legend(|(x, y)| Circle::new((x + 6, y), 4, RATE.filled()));
    chart
        .draw_series(std::iter::once(Circle::new((lo, lo), 0, FEW.filled())))
        .map_err(drawing)?
        .label(format!("bin of fewer than {FEW_ROWS} rows"))
        .legend(|(x, y)| Circle::new((x + 6, y), 4, FEW.filled()));
    chart
        .draw_series(DashedLineSeries::new(
            vec![(lo, lo), (hi, hi)],
            6,
            4,
            DIAGONAL.stroke_width(1),
        ))
        .map_err(drawing)?
        .label("perfect calibration")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], DIAGONAL.stroke_width(1)));
    house_legend(&mut chart)?;
    Ok(())
}

fn draw_counts<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    filled: &[&Bin],
    (lo, hi): (f64, f64),
    span: &dyn Fn(&Bin) -> (f64, f64),
    label: &dyn Fn(&f64) -> String,
    x_desc: &str,
) -> anyhow::Result<()> {
    let max_count = filled.iter().map(|b| b.count).max().unwrap_or(1).max(1) as f64;
    let mut strip = ChartBuilder::on(area)
        .margin_left(8)
        .margin_right(16)
        .margin_bottom(4)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, (0.8f64..max_count * 1.5).log_scale())
        .map_err(drawing)?;
    house_mesh(&mut strip)
        .x_labels(7)
        .y_labels(3)
        .x_label_formatter(label)
        .y_label_formatter(&|v| compact_count(*v))
        .x_desc(x_desc)
        .y_desc("rows")
        .draw()
        .map_err(drawing)?;
    strip
        .draw_series(filled.iter().map(|b| {
            let (l, u) = span(b);
            let color = if b.count < FEW_ROWS {
                FEW.mix(0.6)
            } else {
                COUNTS.mix(1.0)
            };
            Rectangle::new([(l, 0.8), (u, b.count as f64)], color.filled())
        }))
        .map_err(drawing)?;
    Ok(())
}

/// One over-time chart: per model, the daily value with the drift band (alert days in red)
/// and the 7-day rolling value. `metric` picks (daily, rolling, lower, upper) from a day.
pub fn over_time_svg(
    models: &[ModelData],
    name: &str,
    metric: impl Fn(&super::data::Day) -> (Option<f64>, Option<f64>, Option<f64>, Option<f64>),
) -> anyhow::Result<Option<String>> {
    let mut series = Vec::new();
    for model in models {
        let mut daily = Vec::new();
        let mut rolling = Vec::new();
        for (i, day) in model.daily.iter().enumerate() {
            let (value, value_7d, lower, upper) = metric(day);
            let x = (i + 1) as f64;
            if let Some(value) = value {
                daily.push(Point {
                    x,
                    value,
                    lower,
                    upper,
                });
            }
            if let Some(value) = value_7d {
                rolling.push(Point {
                    x,
                    value,
                    lower: None,
                    upper: None,
                });
            }
        }
        let label = model.label();
        series.push(Series {
            name: Some(format!("{label} daily")),
            points: daily,
        });
        series.push(Series {
            name: Some(format!("{label} 7-day")),
            points: rolling,
        });
    }
    series.retain(|s| !s.points.is_empty());
    if series.is_empty() {
        return Ok(None);
    }
    Ok(Some(metric_svg(&series, None, ("day number", name))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probability_labels_are_short() {
        assert_eq!(probability_label(0.001), "0.001");
        assert_eq!(probability_label(0.25), "0.25");
        assert_eq!(probability_label(0.0123), "0.012");
        assert_eq!(probability_label(0.0), "0");
    }
}
