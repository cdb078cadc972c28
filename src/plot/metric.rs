//! Metric time series: `calibsql plot metric`, the drift chart of `sql/monitoring.sql`.
//!
//! The query returns `x` (a day number, a date or a timestamp), `value`, optionally `lower`
//! and `upper` (a band: an interval, or the reference mean ± 3σ of a drift rule) and
//! optionally `series` (one line each). Values outside their band are marked.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::DFParser;
use plotters::prelude::*;

/// One point of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub x: f64,
    pub value: f64,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
}

impl Point {
    /// Whether the value lies outside its band.
    pub fn flagged(&self) -> bool {
        self.lower.is_some_and(|l| self.value < l) || self.upper.is_some_and(|u| self.value > u)
    }
}

/// The points of one `series` value, in x order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: Option<String>,
    pub points: Vec<Point>,
}

/// Runs `sql` (every statement but the last first) and reads its `x`, `value`, `lower`,
/// `upper` and `series` columns.
pub async fn metric_series(ctx: &SessionContext, sql: &str) -> anyhow::Result<Vec<Series>> {
    let mut statements = DFParser::parse_sql(sql)?;
    let last = statements
        .pop_back()
        .ok_or_else(|| anyhow!("no SQL statement to plot"))?;
    for statement in statements {
        crate::cancel::collect(crate::plan_statement(ctx, statement).await?).await?;
    }
    let batches = crate::cancel::collect(crate::plan_statement(ctx, last).await?).await?;
    let mut out: Vec<Series> = vec![];
    for batch in &batches {
        read_batch(batch, &mut out)?;
    }
    out.retain(|s| !s.points.is_empty());
    if out.is_empty() {
        bail!("the query returned no rows with a finite, non-NULL x and value");
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn column_f64(batch: &RecordBatch, name: &str) -> anyhow::Result<Option<Vec<Option<f64>>>> {
    let Some(c) = batch.column_by_name(name) else {
        return Ok(None);
    };
    let c = match c.data_type() {
        DataType::Date32 => cast(c, &DataType::Int32)?,
        DataType::Date64 | DataType::Timestamp(_, _) => cast(c, &DataType::Int64)?,
        _ => c.clone(),
    };
    let c = cast(&c, &DataType::Float64)
        .with_context(|| format!("column {name} must be numeric, a date or a timestamp"))?;
    Ok(Some(c.as_primitive::<Float64Type>().iter().collect()))
}

fn read_batch(batch: &RecordBatch, out: &mut Vec<Series>) -> anyhow::Result<()> {
    let names: Vec<&str> = batch
        .schema_ref()
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let (Some(x), Some(value)) = (column_f64(batch, "x")?, column_f64(batch, "value")?) else {
        bail!(
            "the query must return columns x and value (and optionally lower, upper, series); it returns {}",
            names.join(", ")
        );
    };
    let lower = column_f64(batch, "lower")?;
    let upper = column_f64(batch, "upper")?;
    let series = batch
        .column_by_name("series")
        .map(|c| cast(c, &DataType::Utf8))
        .transpose()?;
    for r in 0..batch.num_rows() {
        // Non-finite points (a metric of Infinity, NaN) cannot be placed: skipped.
        let (Some(x), Some(v)) = (x[r], value[r]) else {
            continue;
        };
        if !x.is_finite() || !v.is_finite() {
            continue;
        }
        let name = series.as_ref().and_then(|s| {
            s.is_valid(r)
                .then(|| s.as_string::<i32>().value(r).to_string())
        });
        let point = Point {
            x,
            value: v,
            lower: lower.as_ref().and_then(|l| l[r]).filter(|v| v.is_finite()),
            upper: upper.as_ref().and_then(|u| u[r]).filter(|v| v.is_finite()),
        };
        match out.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => out.push(Series {
                name,
                points: vec![point],
            }),
        }
    }
    Ok(())
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];
const ALERT: RGBColor = RGBColor(214, 39, 40);

/// The chart as SVG text: one line per series, its band shaded, flagged points in red.
/// `labels`: the x and the value axis names.
pub fn metric_svg(
    series: &[Series],
    title: Option<&str>,
    labels: (&str, &str),
) -> anyhow::Result<String> {
    let (x_label, y_label) = labels;
    let points = series.iter().flat_map(|s| &s.points);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for p in points {
        x0 = x0.min(p.x);
        x1 = x1.max(p.x);
        for v in [Some(p.value), p.lower, p.upper].into_iter().flatten() {
            y0 = y0.min(v);
            y1 = y1.max(v);
        }
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if !(x1 - x0).is_finite() || !(y1 - y0).is_finite() {
        bail!("the values span more than a float can hold ({y0} to {y1}); plot a smaller range");
    }
    let pad = ((y1 - y0) * 0.08).max(1e-9);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title.unwrap_or(""), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(drawing)?;
        let integral = series
            .iter()
            .flat_map(|s| &s.points)
            .all(|p| p.x.fract() == 0.0);
        let x_format = move |x: &f64| {
            if integral {
                format!("{x:.0}")
            } else {
                format!("{x}")
            }
        };
        // Whole-number x (days): one label per value when they fit, so none is rounded.
        let x_labels = if integral && x1 - x0 <= 30.0 {
            (x1 - x0) as usize + 1
        } else {
            10
        };
        chart
            .configure_mesh()
            .x_labels(x_labels)
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&x_format)
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(drawing)?;
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let band: Vec<(f64, f64, f64)> = s
                .points
                .iter()
                .filter_map(|p| Some((p.x, p.lower?, p.upper?)))
                .collect();
            if !band.is_empty() {
                let polygon: Vec<(f64, f64)> = band
                    .iter()
                    .map(|&(x, lo, _)| (x, lo))
                    .chain(band.iter().rev().map(|&(x, _, hi)| (x, hi)))
                    .collect();
                chart
                    .draw_series(std::iter::once(Polygon::new(polygon, color.mix(0.15))))
                    .map_err(drawing)?;
            }
            let label = s.name.clone().unwrap_or_else(|| y_label.to_string());
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().map(|p| (p.x, p.value)),
                    color.stroke_width(2),
                ))
                .map_err(drawing)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            chart
                .draw_series(s.points.iter().map(|p| {
                    let c = if p.flagged() { ALERT } else { color };
                    Circle::new((p.x, p.value), if p.flagged() { 5 } else { 3 }, c.filled())
                }))
                .map_err(drawing)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(drawing)?;
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

/// Writes [`metric_svg`] to `path`.
pub fn write_metric_svg(
    path: &Path,
    series: &[Series],
    title: Option<&str>,
    labels: (&str, &str),
) -> anyhow::Result<()> {
    let svg = metric_svg(series, title, labels)?;
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}

fn drawing<E: std::fmt::Display>(error: E) -> anyhow::Error {
    anyhow!("cannot draw the chart: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_outside_its_band_is_flagged() {
        let p = |value| Point {
            x: 1.0,
            value,
            lower: Some(0.1),
            upper: Some(0.2),
        };
        assert!(!p(0.15).flagged());
        assert!(p(0.25).flagged());
        assert!(p(0.05).flagged());
        let svg = metric_svg(
            &[Series {
                name: Some("ctr".into()),
                points: vec![p(0.15), Point { x: 2.0, ..p(0.3) }],
            }],
            Some("t"),
            ("day", "ece"),
        )
        .unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("ctr"));
    }
}
