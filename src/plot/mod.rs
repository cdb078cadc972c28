//! Reliability diagrams: `calibsql plot reliability` and the diagrams of `calibsql demo`.
//!
//! The bins come from the `reliability`, `ece` and `mce` SQL functions over the query's
//! `p` and `y` (grouped by its optional `series` column), so a diagram shows exactly the
//! numbers a query would. The drawing follows Guo et al. (2017) and Kweon et al. (2022,
//! Figure 1): per bin, a bar up to the fraction of positives; the gap between it and the bin's
//! mean predicted probability; the bin's 95% Wilson interval of the fraction of positives
//! (`reliability`'s `frac_pos_lower`/`frac_pos_upper`) as an error bar, unless turned off;
//! the diagonal of perfect calibration; and under it a strip with the rows per bin on a log
//! scale. One panel per `series` value, in sorted order.

use std::fmt::Display;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use datafusion::arrow::array::{Array, AsArray, RecordBatch, StructArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::DFParser;
use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

pub mod metric;

/// Bins of a diagram unless told otherwise (as `ece`'s default).
pub const DEFAULT_BINS: u32 = 15;

/// How the probabilities are cut into bins (the `strategy` argument of `reliability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Equal-width bins `[k/M, (k+1)/M)`.
    #[default]
    Uniform,
    /// Equal-mass bins.
    Quantile,
}

impl Strategy {
    /// The names [`Strategy::from_name`] accepts.
    pub const NAMES: [&'static str; 2] = ["uniform", "quantile"];

    /// The strategy whose SQL literal is `name`.
    pub fn from_name(name: &str) -> Option<Strategy> {
        match name {
            "uniform" => Some(Strategy::Uniform),
            "quantile" => Some(Strategy::Quantile),
            _ => None,
        }
    }

    /// The SQL literal.
    pub fn sql(self) -> &'static str {
        match self {
            Strategy::Uniform => "uniform",
            Strategy::Quantile => "quantile",
        }
    }
}

/// One bin of a panel, as `reliability` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    pub lower: Option<f64>,
    pub upper: Option<f64>,
    pub count: i64,
    pub mean_p: Option<f64>,
    pub frac_pos: Option<f64>,
    /// The Wilson interval of `frac_pos` (95%) that `reliability` returns.
    pub frac_pos_lower: Option<f64>,
    pub frac_pos_upper: Option<f64>,
}

/// One panel: the rows of one `series` value.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The `series` value (`None` without a `series` column).
    pub series: Option<String>,
    pub ece: f64,
    pub mce: f64,
    pub rows: i64,
    pub bins: Vec<Bin>,
}

/// Runs `sql` on `ctx` and bins its result per `series`. Every statement but the last runs
/// first (e.g. `CREATE VIEW`); the last must be a query returning the columns `p` (a
/// probability) and `y` (0/1 or Boolean), and optionally `series` (any type, shown as text).
pub async fn reliability_panels(
    ctx: &SessionContext,
    sql: &str,
    bins: u32,
    strategy: Strategy,
) -> anyhow::Result<Vec<Panel>> {
    let mut statements = DFParser::parse_sql(sql)?;
    let last = statements
        .pop_back()
        .ok_or_else(|| anyhow!("no SQL statement to plot"))?;
    for statement in statements {
        crate::cancel::collect(crate::plan_statement(ctx, statement).await?).await?;
    }
    let frame = crate::plan_statement(ctx, last).await?;
    let schema = frame.schema().clone();
    let has = |name: &str| schema.fields().iter().any(|f| f.name() == name);
    if !has("p") || !has("y") {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        bail!(
            "the query must return columns p and y (and optionally series); it returns {}",
            if names.is_empty() {
                "no columns".to_string()
            } else {
                names.join(", ")
            }
        );
    }
    let view = "__calibsql_reliability_input";
    ctx.register_table(view, frame.into_view())?;
    let strategy = strategy.sql();
    let (series, group) = if has("series") {
        ("CAST(series AS VARCHAR)", "GROUP BY 1 ORDER BY 1")
    } else {
        ("CAST(NULL AS VARCHAR)", "")
    };
    let query = format!(
        "SELECT {series} AS series, ece(p, y, {bins}, '{strategy}') AS ece, \
         mce(p, y, {bins}, '{strategy}') AS mce, reliability(p, y, {bins}, '{strategy}') AS bins \
         FROM {view} {group}"
    );
    let result = async { crate::cancel::collect(ctx.sql(&query).await?).await }.await;
    ctx.deregister_table(view)?;
    let batches = result?;
    let mut panels = Vec::new();
    for batch in &batches {
        panels.extend(read_panels(batch)?);
    }
    let has_series = has("series");
    panels.retain(|panel| panel.rows > 0);
    if panels.is_empty() {
        bail!("the query returned no rows with non-NULL p and y");
    }
    if !has_series {
        for panel in &mut panels {
            panel.series = None;
        }
    }
    Ok(panels)
}

fn read_panels(batch: &RecordBatch) -> anyhow::Result<Vec<Panel>> {
    let series = cast(batch.column(0), &DataType::Utf8)?;
    let series = series.as_string::<i32>();
    let ece = batch.column(1).as_primitive::<Float64Type>();
    let mce = batch.column(2).as_primitive::<Float64Type>();
    let lists = batch.column(3).as_list::<i32>();
    let mut panels = Vec::new();
    for row in 0..batch.num_rows() {
        if lists.is_null(row) {
            continue;
        }
        let list = lists.value(row);
        let bins = read_bins(list.as_struct())?;
        panels.push(Panel {
            series: Some(if series.is_null(row) {
                "NULL".to_string()
            } else {
                series.value(row).to_string()
            }),
            ece: ece.value(row),
            mce: mce.value(row),
            rows: bins.iter().map(|b| b.count).sum(),
            bins,
        });
    }
    Ok(panels)
}

fn read_bins(bins: &StructArray) -> anyhow::Result<Vec<Bin>> {
    let float = |name: &str| -> anyhow::Result<Vec<Option<f64>>> {
        let column = bins
            .column_by_name(name)
            .with_context(|| format!("reliability() has no field {name}"))?;
        Ok(column.as_primitive::<Float64Type>().iter().collect())
    };
    let lower = float("lower")?;
    let upper = float("upper")?;
    let mean_p = float("mean_p")?;
    let frac_pos = float("frac_pos")?;
    let frac_pos_lower = float("frac_pos_lower")?;
    let frac_pos_upper = float("frac_pos_upper")?;
    let count = bins
        .column_by_name("count")
        .context("reliability() has no field count")?
        .as_primitive::<Int64Type>();
    Ok((0..bins.len())
        .map(|i| Bin {
            lower: lower[i],
            upper: upper[i],
            count: count.value(i),
            mean_p: mean_p[i],
            frac_pos: frac_pos[i],
            frac_pos_lower: frac_pos_lower[i],
            frac_pos_upper: frac_pos_upper[i],
        })
        .collect())
}

/// Width and height of one panel, in pixels.
const PANEL: (u32, u32) = (360, 430);
/// Panels per row of the figure.
const COLUMNS: usize = 4;
/// Height of the figure's title line.
const TITLE_HEIGHT: u32 = 36;

const BAR: RGBColor = RGBColor(31, 119, 180);
const GAP: RGBColor = RGBColor(214, 39, 40);
const DIAGONAL: RGBColor = RGBColor(90, 90, 90);
const COUNTS: RGBColor = RGBColor(120, 120, 120);
const INTERVAL: RGBColor = RGBColor(20, 20, 20);

/// The diagram as SVG text: one panel per element of `panels` (at most four per row), an
/// optional `title` above them; with `intervals`, each bin's Wilson interval of the fraction
/// of positives as an error bar.
pub fn reliability_svg(
    panels: &[Panel],
    title: Option<&str>,
    strategy: Strategy,
    intervals: bool,
) -> anyhow::Result<String> {
    let columns = panels.len().clamp(1, COLUMNS);
    let rows = panels.len().div_ceil(COLUMNS).max(1);
    let title_height = if title.is_some() { TITLE_HEIGHT } else { 0 };
    let size = (
        PANEL.0 * columns as u32,
        PANEL.1 * rows as u32 + title_height,
    );
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let body = match title {
            Some(title) => root
                .titled(title, ("sans-serif", 20).into_font().style(FontStyle::Bold))
                .map_err(drawing)?,
            None => root.clone(),
        };
        let areas = body.split_evenly((rows, columns));
        for (i, (panel, area)) in panels.iter().zip(&areas).enumerate() {
            draw_panel(area, panel, strategy, i == 0, intervals)?;
        }
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

/// Writes [`reliability_svg`] to `path`.
pub fn write_reliability_svg(
    path: &Path,
    panels: &[Panel],
    title: Option<&str>,
    strategy: Strategy,
    intervals: bool,
) -> anyhow::Result<()> {
    let svg = reliability_svg(panels, title, strategy, intervals)?;
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}

pub(crate) fn drawing<E: Display>(error: E) -> anyhow::Error {
    anyhow!("cannot draw the diagram: {error}")
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    strategy: Strategy,
    legend: bool,
    intervals: bool,
) -> anyhow::Result<()> {
    // Uniform bins span [0, 1]. Quantile bins zoom on the range of the bins' means (the last
    // bin, up to the largest p, is cut at the edge).
    let x_max = match strategy {
        Strategy::Uniform => 1.0,
        Strategy::Quantile => nice_upper(
            1.15 * panel
                .bins
                .iter()
                .flat_map(|b| [b.frac_pos, b.mean_p])
                .flatten()
                .fold(0.0, f64::max),
        ),
    };
    let decimals = if x_max < 0.5 { 2 } else { 1 };
    let caption = match &panel.series {
        Some(series) => format!("{series}  ·  ECE {:.4}", panel.ece),
        None => format!("ECE {:.4}  ·  MCE {:.4}", panel.ece, panel.mce),
    };
    let (top, bottom) = area.split_vertically(PANEL.1 - 120);

    let mut chart = ChartBuilder::on(&top)
        .caption(caption, ("sans-serif", 15))
        .margin_top(6)
        .margin_left(8)
        .margin_right(14)
        .x_label_area_size(18)
        .y_label_area_size(52)
        .build_cartesian_2d(0f64..x_max, 0f64..x_max)
        .map_err(drawing)?;
    house_mesh(&mut chart)
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .y_desc("fraction of positives")
        .draw()
        .map_err(drawing)?;

    let filled: Vec<&Bin> = panel
        .bins
        .iter()
        .filter(|b| b.count > 0 && b.frac_pos.is_some() && b.mean_p.is_some())
        .collect();
    let span = |b: &Bin| {
        let lower = b.lower.unwrap_or(0.0).min(x_max);
        let upper = b
            .upper
            .unwrap_or(lower)
            .max(lower + x_max * 0.004)
            .min(x_max);
        (lower, upper)
    };
    // The span between the observed rate and the mean prediction.
    let gap = |b: &Bin| {
        let (a, c) = (b.frac_pos.unwrap_or(0.0), b.mean_p.unwrap_or(0.0));
        (a.min(c), a.max(c))
    };
    // One labelled bar per bin, from `ends(bin).0` to `ends(bin).1`.
    let mut bars = |style: ShapeStyle, label: &str, ends: &dyn Fn(&Bin) -> (f64, f64)| {
        chart
            .draw_series(filled.iter().map(|b| {
                let ((lower, upper), (y0, y1)) = (span(b), ends(b));
                Rectangle::new([(lower, y0), (upper, y1)], style)
            }))
            .map_err(drawing)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], style));
        anyhow::Ok(())
    };
    bars(BAR.mix(0.8).filled(), "fraction of positives", &|b| {
        (0.0, b.frac_pos.unwrap_or(0.0))
    })?;
    bars(GAP.mix(0.15).filled(), "gap to the mean prediction", &gap)?;
    // The gap hatched and outlined, so it shows over the bar too.
    chart
        .draw_series(filled.iter().flat_map(|b| {
            let ((lower, upper), (y0, y1)) = (span(b), gap(b));
            hatch(lower, upper, y0, y1, x_max / 40.0)
                .into_iter()
                .map(|line| PathElement::new(line, GAP.mix(0.55).stroke_width(1)))
        }))
        .map_err(drawing)?;
    chart
        .draw_series(filled.iter().map(|b| {
            let ((lower, upper), (y0, y1)) = (span(b), gap(b));
            Rectangle::new([(lower, y0), (upper, y1)], GAP.mix(0.7).stroke_width(1))
        }))
        .map_err(drawing)?;
    chart
        .draw_series(filled.iter().map(|b| {
            let (lower, upper) = span(b);
            let c = b.mean_p.unwrap_or(0.0);
            PathElement::new(vec![(lower, c), (upper, c)], GAP.stroke_width(2))
        }))
        .map_err(drawing)?;
    if intervals {
        // Each bin's Wilson interval of the fraction of positives: a vertical bar with caps
        // at the middle of the bin (clipped to the chart, whose top may cut quantile bins).
        let bars: Vec<(f64, f64, f64, f64)> = filled
            .iter()
            .filter_map(|b| {
                let (lower, upper) = span(b);
                let (lo, hi) = (b.frac_pos_lower?, b.frac_pos_upper?);
                let cap = ((upper - lower) * 0.25).min(x_max * 0.015);
                Some(((lower + upper) / 2.0, lo.min(x_max), hi.min(x_max), cap))
            })
            .collect();
        chart
            .draw_series(bars.iter().map(|&(x, lo, hi, cap)| {
                PathElement::new(
                    vec![
                        (x - cap, lo),
                        (x + cap, lo),
                        (x, lo),
                        (x, hi),
                        (x - cap, hi),
                        (x + cap, hi),
                    ],
                    INTERVAL.stroke_width(1),
                )
            }))
            .map_err(drawing)?
            .label("95% Wilson interval")
            .legend(|(x, y)| {
                PathElement::new(
                    vec![(x + 6, y - 5), (x + 6, y + 5)],
                    INTERVAL.stroke_width(1),
                )
            });
    }
    chart
        .draw_series(DashedLineSeries::new(
            vec![(0.0, 0.0), (x_max, x_max)],
            6,
            4,
            DIAGONAL.stroke_width(1),
        ))
        .map_err(drawing)?
        .label("perfect calibration")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], DIAGONAL.stroke_width(1)));
    if legend {
        house_legend(&mut chart)?;
    }

    // The rows per bin, log scale.
    let max_count = filled.iter().map(|b| b.count).max().unwrap_or(1).max(1) as f64;
    let mut strip = ChartBuilder::on(&bottom)
        .margin_left(8)
        .margin_right(14)
        .margin_bottom(4)
        .x_label_area_size(34)
        .y_label_area_size(52)
        .build_cartesian_2d(0f64..x_max, (0.8f64..max_count * 1.5).log_scale())
        .map_err(drawing)?;
    house_mesh(&mut strip)
        .x_labels(6)
        .y_labels(3)
        .x_label_formatter(&|v| format!("{v:.decimals$}"))
        .y_label_formatter(&|v| compact_count(*v))
        .x_desc("mean predicted probability")
        .y_desc("rows")
        .draw()
        .map_err(drawing)?;
    strip
        .draw_series(filled.iter().map(|b| {
            let (lower, upper) = span(b);
            Rectangle::new([(lower, 0.8), (upper, b.count as f64)], COUNTS.filled())
        }))
        .map_err(drawing)?;
    Ok(())
}

/// Diagonal lines `y = x + k·spacing` clipped to the rectangle `[x0, x1] × [y0, y1]`.
fn hatch(x0: f64, x1: f64, y0: f64, y1: f64, spacing: f64) -> Vec<Vec<(f64, f64)>> {
    let mut lines = Vec::new();
    if !(spacing > 0.0 && x1 > x0 && y1 > y0) {
        return lines;
    }
    // Offsets c = y − x from the bottom-right corner to the top-left one.
    let first = ((y0 - x1) / spacing).ceil() as i64;
    let last = ((y1 - x0) / spacing).floor() as i64;
    for k in first..=last {
        let c = k as f64 * spacing;
        let (start, end) = (x0.max(y0 - c), x1.min(y1 - c));
        if end > start {
            lines.push(vec![(start, start + c), (end, end + c)]);
        }
    }
    lines
}

/// A chart's grid and labels in the house style: no minor lines, faint major lines, 12-px
/// labels and 13-px axis descriptions. The caller adds the label counts, formatters and
/// descriptions, then draws.
pub(crate) fn house_mesh<'a, 'b, DB, XT, YT, X, Y>(
    chart: &'b mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> MeshStyle<'a, 'b, X, Y, DB>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
{
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .axis_desc_style(("sans-serif", 13))
        .label_style(("sans-serif", 12));
    mesh
}

/// The legend of a chart's labelled series in the house style: upper left, on a translucent
/// box.
pub(crate) fn house_legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.2))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(drawing)
}

/// 1, 10, 100, 1k, 10k, 1M … for the log axis.
pub(crate) fn compact_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.0}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A round axis end at or above `v` (0.05 steps below 0.5, 0.1 steps above), at most 1.
pub(crate) fn nice_upper(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let step = if v < 0.5 { 0.05 } else { 0.1 };
    ((v / step).ceil() * step).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ends_are_round() {
        assert_eq!(nice_upper(0.0), 1.0);
        assert!((nice_upper(0.12) - 0.15).abs() < 1e-12);
        assert!((nice_upper(0.71) - 0.8).abs() < 1e-12);
        assert_eq!(nice_upper(0.99), 1.0);
        assert_eq!(compact_count(20_000.0), "20k");
    }

    #[test]
    fn hatch_lines_stay_inside() {
        let lines = hatch(0.2, 0.3, 0.1, 0.5, 0.05);
        assert!(!lines.is_empty());
        for line in &lines {
            for &(x, y) in line {
                assert!((0.2 - 1e-12..=0.3 + 1e-12).contains(&x), "{x}");
                assert!((0.1 - 1e-12..=0.5 + 1e-12).contains(&y), "{y}");
            }
        }
        assert!(hatch(0.2, 0.3, 0.4, 0.4, 0.05).is_empty());
    }
}
