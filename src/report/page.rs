//! The page: a maud template over [`ReportData`] and the charts.
//!
//! One file with no external URL: the style and the table-sorting script are inline, and the
//! Content-Security-Policy forbids loading anything (`default-src 'none'`). Every value is
//! escaped by maud; `PreEscaped` holds only the constant style and script, plotters' SVG
//! (which escapes its own text) and the JSON, whose `<`, `>` and `&` are written as `\u003c`,
//! `\u003e` and `\u0026` so no value can end the script element.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::charts::{self, FEW_ROWS};
use super::data::{Bin, ModelData, ReportData};
use super::status::{ALERT_RATIO, WARN_RATIO, WARN_RELATIVE_ECE};
use super::Axis;
use crate::plot::Strategy;

const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; \
                   img-src data:; base-uri 'none'; form-action 'none'";

const STYLE: &str = r#"
:root { color-scheme: light dark; --fg: #1d2330; --bg: #ffffff; --muted: #5d6675; --line: #d9dde3;
  --card: #f6f7f9; --ok: #1b7f3b; --warn: #a86500; --alert: #c0262d; --unknown: #6b7280; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e4e7ec; --bg: #14171c; --muted: #9aa3b2; --line: #323843; --card: #1c2028;
    --ok: #4cc274; --warn: #f0a640; --alert: #ff6b6b; --unknown: #9aa3b2; }
}
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  background: var(--bg); margin: 0 auto; padding: 1.5rem; max-width: 1200px; }
h1 { margin: 0 0 .4rem; font-size: 1.7rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid var(--line); }
h3 { margin-top: 1.4rem; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: .6rem 0; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; }
.badges { display: flex; flex-wrap: wrap; gap: .5rem; margin: .8rem 0; }
.badge { border-radius: 1rem; padding: .15rem .7rem; color: #fff; font-weight: 600; font-size: .9rem; }
.badge.ok { background: var(--ok); } .badge.warn { background: var(--warn); }
.badge.alert { background: var(--alert); } .badge.unknown { background: var(--unknown); }
.notes { border-left: 4px solid var(--warn); background: var(--card); padding: .5rem 1rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-variant-numeric: tabular-nums; }
th, td { padding: .25rem .6rem; border-bottom: 1px solid var(--line); text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: var(--card); cursor: pointer; user-select: none; }
tr.few td { color: var(--muted); } td.alert { color: var(--alert); font-weight: 600; }
ul.reasons { margin: 0 0 .6rem; color: var(--muted); font-size: .9rem; }
td.sig { color: var(--alert); }
figure { margin: .5rem 0 1rem; display: inline-block; background: #fff; border-radius: 6px;
  padding: 4px; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { color: #444; font-size: .85rem; padding: .2rem .4rem; }
pre { background: var(--card); padding: .7rem; overflow-x: auto; font-size: .8rem; white-space: pre-wrap; }
.muted { color: var(--muted); }
@media print { th { cursor: auto; } h2 { break-before: auto; } figure, table { break-inside: avoid; } }
"#;

/// Click a header to sort its table by that column (numbers by value, text alphabetically).
const SORT_SCRIPT: &str = r#"
document.querySelectorAll("table.sortable th").forEach(function (th, _, all) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var up = th.getAttribute("aria-sort") !== "ascending";
    th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    var key = function (row) {
      var cell = row.children[col], v = cell.getAttribute("data-v");
      return v !== null ? parseFloat(v) : cell.textContent;
    };
    Array.prototype.slice.call(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      var c = (typeof x === "number" && typeof y === "number") ? (isNaN(x) - isNaN(y) || x - y)
        : String(x).localeCompare(String(y));
      return up ? c : -c;
    }).forEach(function (row) { body.appendChild(row); });
  });
});
"#;

/// A number with four significant digits (`n/a` for a missing one).
fn num(value: Option<f64>) -> String {
    match value {
        None => "n/a".to_string(),
        Some(0.0) => "0".to_string(),
        Some(v) if v.abs() >= 1e6 || v.abs() < 1e-4 => format!("{v:.3e}"),
        Some(v) if v.abs() >= 1e4 => format!("{v:.0}"),
        Some(v) => {
            let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 10) as usize;
            format!("{v:.digits$}")
        }
    }
}

/// A count with thousands separators.
fn count(value: i64) -> String {
    let text = value.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i > 0 && (text.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn interval(lower: Option<f64>, upper: Option<f64>) -> String {
    match (lower, upper) {
        (None, None) => String::new(),
        _ => format!("[{}, {}]", num(lower), num(upper)),
    }
}

/// A sort key for `data-v` (empty for a missing value, which sorts as NaN).
fn key(value: Option<f64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// The JSON for a `<script type="application/json">` element.
fn script_json(data: &ReportData) -> anyhow::Result<String> {
    Ok(serde_json::to_string(data)?
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026"))
}

/// Reads one number of a model.
type Value = Box<dyn Fn(&ModelData) -> Option<f64>>;
/// Reads an interval (lower, upper) of a model.
type Interval = Box<dyn Fn(&ModelData) -> (Option<f64>, Option<f64>)>;

/// One row of the headline table: a label and how to read the value (and its interval) from
/// a model.
struct HeadlineRow {
    label: String,
    value: Value,
    interval: Option<Interval>,
}

/// The rows of the headline table, in order. A new metric (a column of the headline query)
/// is one more entry here.
fn headline_rows(data: &ReportData) -> Vec<HeadlineRow> {
    let row = |label: &str, value: fn(&ModelData) -> Option<f64>| HeadlineRow {
        label: label.to_string(),
        value: Box::new(value),
        interval: None,
    };
    let with_interval =
        |label: &str, value: fn(&ModelData) -> Option<f64>, interval: Interval| HeadlineRow {
            label: label.to_string(),
            value: Box::new(value),
            interval: Some(interval),
        };
    // A coefficient with its Wald interval: estimate ± z · standard error.
    let wald =
        |label: &str, value: fn(&ModelData) -> Option<f64>, se: fn(&ModelData) -> Option<f64>| {
            let z = normal_quantile_of_level();
            with_interval(
                label,
                value,
                Box::new(move |m| match (value(m), se(m)) {
                    (Some(v), Some(s)) => (Some(v - z * s), Some(v + z * s)),
                    _ => (None, None),
                }),
            )
        };
    let mut rows = vec![
        with_interval(
            "Calibration ratio Σp / Σy",
            |m| m.ratio,
            Box::new(|m| (m.ratio_lower, m.ratio_upper)),
        ),
        with_interval(
            "ECE (uniform bins)",
            |m| m.ece,
            Box::new(|m| (m.ece_lower, m.ece_upper)),
        ),
        row("ECE (equal-mass bins)", |m| m.ece_quantile),
        row("MCE", |m| m.mce),
    ];
    for field in &data.parameters.fields {
        let name = field.clone();
        rows.push(HeadlineRow {
            label: format!("Field-RCE ({field})"),
            value: Box::new(move |m| m.field_rce.get(&name).copied().flatten()),
            interval: None,
        });
    }
    rows.extend([
        row("Log loss", |m| m.logloss),
        row("Normalized entropy", |m| m.normalized_entropy),
        row("Brier score", |m| m.brier),
        with_interval("AUC", |m| m.auc, Box::new(|m| (m.auc_lower, m.auc_upper))),
    ]);
    // Labels still to come: the AUC the probabilities imply (CBPE over every scored row)
    // beside the one realised on the labelled rows.
    if data.rows_unlabelled > 0 {
        rows.push(row("AUC expected from p (CBPE, every scored row)", |m| {
            m.expected_auc
        }));
    }
    rows.extend([
        row("Spiegelhalter z", |m| m.spiegelhalter_z),
        row("Spiegelhalter p-value", |m| m.spiegelhalter_p),
        wald("Calibration intercept", |m| m.intercept, |m| m.intercept_se),
        wald("Calibration slope", |m| m.slope, |m| m.slope_se),
        wald("Calibration-in-the-large", |m| m.citl, |m| m.citl_se),
        row("Miscalibration (CORP, Brier)", |m| m.miscalibration),
        row("Discrimination (CORP, Brier)", |m| m.discrimination),
        row("Uncertainty (CORP, Brier)", |m| m.uncertainty),
    ]);
    rows
}

/// Φ⁻¹((1 + level) / 2) of the report's level (95%: 1.96).
fn normal_quantile_of_level() -> f64 {
    calibsql_udfs::stats::normal_quantile((1.0 + super::LEVEL) / 2.0)
}

/// The whole page.
pub fn render(data: &ReportData, axis: Axis) -> anyhow::Result<String> {
    let strategy = Strategy::from_name(&data.parameters.strategy).unwrap_or_default();
    let mut reliability = Vec::new();
    for model in &data.models {
        reliability.push(charts::reliability_svg(model, strategy, axis)?);
    }
    let over_time: Vec<(&str, Option<String>)> = if data.columns.day {
        vec![
            (
                "ECE",
                charts::over_time_svg(&data.models, "ECE", |d| {
                    (d.ece, d.ece_7d, d.ece_lower, d.ece_upper)
                })?,
            ),
            (
                "Calibration ratio",
                charts::over_time_svg(&data.models, "Σp / Σy", |d| {
                    (d.ratio, d.ratio_7d, d.ratio_lower, d.ratio_upper)
                })?,
            ),
            (
                "Log loss",
                charts::over_time_svg(&data.models, "log loss", |d| {
                    (d.logloss, d.logloss_7d, d.logloss_lower, d.logloss_upper)
                })?,
            ),
        ]
    } else {
        vec![]
    };
    let json = script_json(data)?;
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content={ "calibsql " (data.calibsql_version) };
                title { (data.title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                (header(data))
                (headline(data))
                section id="reliability" {
                    h2 { "Reliability" }
                    @if data.models.is_empty() {
                        p.muted { "No rows: no reliability diagram." }
                    }
                    @for (model, svg) in data.models.iter().zip(&reliability) {
                        h3 { (model.label()) }
                        @match svg {
                            Some(svg) => figure.chart data-chart={ "reliability " (model.label()) } {
                                (PreEscaped(svg))
                                figcaption {
                                    (data.parameters.bins) " " (data.parameters.strategy)
                                    " bins; dots: observed rate against mean prediction, band: its 95% Wilson interval, grey: bins of fewer than "
                                    (FEW_ROWS) " rows; below: rows per bin (log scale)."
                                }
                            },
                            None => p.muted { "No bin has rows: no diagram." },
                        }
                    }
                }
                section id="bins" {
                    h2 { "Per-bin table" }
                    @for model in &data.models {
                        h3 { (model.label()) }
                        (bin_table(model))
                    }
                }
                section id="over-time" {
                    h2 { "Over time" }
                    @if !data.columns.day {
                        p.muted { "The query has no day column: no values over time." }
                    } @else {
                        p {
                            "Daily and 7-day rolling values merged from daily states (ece_state/ece_merge, logloss_state/logloss_merge). "
                            "The band is the drift rule of sql/monitoring.sql: the mean ± 3 standard deviations of the daily values of the first "
                            (data.parameters.reference_days) " days; a day outside it is marked in red."
                        }
                        @for (name, svg) in &over_time {
                            @if let Some(svg) = svg {
                                figure.chart data-chart={ "over time " (name) } {
                                    (PreEscaped(svg))
                                    figcaption { (name) " per day (x: day number from the first day)" }
                                }
                            }
                        }
                        @for model in &data.models {
                            h3 { (model.label()) }
                            (day_table(model))
                        }
                    }
                }
                section id="segments" {
                    h2 { "Segments" }
                    @if data.parameters.fields.is_empty() {
                        p.muted { "No --field given: no segments." }
                    } @else {
                        p {
                            "Per field, the values ranked by weight × |ratio − 1| (values without a positive, whose ratio is undefined, last), the top "
                            (data.parameters.top_segments) " and the rest pooled as “other”. "
                            "Ratio interval: the 95% Wilson interval of the observed rate. Significant: field_bias's Holm-adjusted p-value "
                            "(over all the field's values, Wilson z) is below 0.05, so the value's miscalibration is real at a 5% family-wise error rate; "
                            "“other” pools values and has no test."
                        }
                    }
                    @for model in &data.models {
                        @for field in &model.segments {
                            h3 { (model.label()) " · " (field.field) " (" (count(field.values)) " values)" }
                            (segment_table(field))
                        }
                    }
                }
                (appendix(data, &json))
                script { (PreEscaped(SORT_SCRIPT)) }
            }
        }
    };
    Ok(markup.into_string())
}

fn header(data: &ReportData) -> Markup {
    html! {
        header id="header" {
            h1 { (data.title) }
            dl.meta {
                dt { "Source" }
                dd {
                    @if data.source.is_empty() { "the query in the appendix" }
                    @else { (data.source.join(", ")) }
                }
                dt { "Rows" }
                dd {
                    (count(data.rows))
                    @if data.rows_dropped > 0 { " (" (count(data.rows_dropped)) " left out: NULL or NaN)" }
                }
                dt { "Weighted count" }
                dd { (num(data.weight)) }
                dt { "Time range" }
                dd {
                    @match &data.time_range {
                        Some((first, last)) => { (first) " to " (last) },
                        None => span.muted { "no day column" },
                    }
                }
                dt { "Parameters" }
                dd {
                    (data.parameters.bins) " bins, " (data.parameters.strategy) " strategy, reference "
                    (data.parameters.reference_days) " days, fields: "
                    @if data.parameters.fields.is_empty() { "none" } @else { (data.parameters.fields.join(", ")) }
                }
                dt { "calibsql" }
                dd { (data.calibsql_version) }
                dt { "Generated" }
                dd { (data.generated_at.as_deref().unwrap_or("")) " UTC" }
            }
            div.badges {
                @for model in &data.models {
                    span class={ "badge " (model.status.level) } title=(model.status.reasons.join("; ")) {
                        (model.label()) ": " (model.status.level.to_uppercase())
                    }
                }
            }
            ul.reasons {
                @for model in &data.models {
                    @for reason in &model.status.reasons { li { (model.label()) ": " (reason) } }
                }
            }
            @let notes: Vec<String> = data.notes.iter().cloned()
                .chain(data.models.iter().flat_map(|m| m.notes.iter().map(move |n| format!("{}: {n}", m.label()))))
                .collect();
            @if !notes.is_empty() {
                div.notes id="notes" {
                    strong { "Not computed" }
                    ul { @for note in &notes { li { (note) } } }
                }
            }
        }
    }
}

fn headline(data: &ReportData) -> Markup {
    html! {
        section id="headline" {
            h2 { "Headline numbers" }
            @if data.models.is_empty() {
                p.muted { "No rows: no numbers." }
            } @else {
                table.sortable {
                    thead { tr {
                        th { "metric" }
                        @for model in &data.models { th { (model.label()) } }
                    } }
                    tbody {
                        tr {
                            td { "Rows" }
                            @for model in &data.models { td data-v=(model.rows) { (count(model.rows)) } }
                        }
                        tr {
                            td { "Weight" }
                            @for model in &data.models { td data-v=(key(model.weight)) { (num(model.weight)) } }
                        }
                        @for row in headline_rows(data) {
                            tr {
                                td { (row.label) }
                                @for model in &data.models {
                                    @let value = (row.value)(model);
                                    td data-v=(key(value)) {
                                        (num(value))
                                        @if let Some(interval_of) = &row.interval {
                                            @let (lower, upper) = interval_of(model);
                                            " " span.muted { (interval(lower, upper)) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                p.muted {
                    "In brackets: 95% intervals. Ratio: Wilson interval of the observed rate; ECE: Poisson bootstrap over the rows' key "
                    "(ece_interval, only with a key column and no w); AUC: DeLong (auc_interval, unweighted: not with w); "
                    "intercept, slope and calibration-in-the-large (calibration_slope): estimate ± 1.96 standard errors, perfect at 0, 1 and 0. "
                    "Spiegelhalter's test (spiegelhalter): a small p-value says the predictions are miscalibrated. "
                    "CORP decomposition (calibration_decomposition): Brier score = miscalibration − discrimination + uncertainty."
                }
                @if !data.comparisons.is_empty() {
                    h3 { "Paired comparison" }
                    p {
                        "The model with the lowest ECE against each other model, on the rows they share by key: the ECE difference with its paired "
                        "Poisson-bootstrap 95% interval (ece_diff_interval: an interval that leaves out 0 is a real difference) and DeLong's paired "
                        "test of the AUCs (auc_test)."
                    }
                    (comparison_table(data))
                }
            }
        }
    }
}

fn comparison_table(data: &ReportData) -> Markup {
    let name = |m: &Option<String>| m.clone().unwrap_or_default();
    html! {
        table.sortable {
            thead { tr {
                th { "model A" } th { "model B" } th { "rows" } th { "ECE A − B" } th { "95% interval" }
                th { "AUC A" } th { "AUC B" } th { "AUC A − B" } th { "z" } th { "p-value" }
            } }
            tbody {
                @for c in &data.comparisons {
                    tr {
                        td { (name(&c.model_a)) }
                        td { (name(&c.model_b)) }
                        td data-v=(c.rows) { (count(c.rows)) }
                        td data-v=(key(c.ece_diff)) { (num(c.ece_diff)) }
                        td { (interval(c.ece_diff_lower, c.ece_diff_upper)) }
                        td data-v=(key(c.auc_a)) { (num(c.auc_a)) }
                        td data-v=(key(c.auc_b)) { (num(c.auc_b)) }
                        td data-v=(key(c.auc_diff)) { (num(c.auc_diff)) }
                        td data-v=(key(c.auc_z)) { (num(c.auc_z)) }
                        td data-v=(key(c.auc_p_value)) { (num(c.auc_p_value)) }
                    }
                }
            }
        }
    }
}

fn bin_table(model: &ModelData) -> Markup {
    // The share of ECE: a bin's weight × |gap| over the sum of them.
    let gaps: Vec<Option<f64>> = model
        .reliability
        .iter()
        .map(|b| Some(b.weight? * (b.frac_pos? - b.mean_p?).abs()))
        .collect();
    let total: f64 = gaps.iter().flatten().sum();
    let share = |i: usize| gaps[i].filter(|_| total > 0.0).map(|g| g / total);
    let gap = |b: &Bin| Some(b.frac_pos? - b.mean_p?);
    html! {
        table.sortable {
            thead { tr {
                th { "bin" } th { "lower" } th { "upper" } th { "n" } th { "weight" } th { "mean p" }
                th { "observed rate" } th { "95% interval" } th { "gap" } th { "share of ECE" }
            } }
            tbody {
                @for (i, b) in model.reliability.iter().enumerate() {
                    tr class=[(b.count < FEW_ROWS).then_some("few")] {
                        td data-v=(b.bin) { (b.bin) }
                        td data-v=(key(b.lower)) { (num(b.lower)) }
                        td data-v=(key(b.upper)) { (num(b.upper)) }
                        td data-v=(b.count) { (count(b.count)) }
                        td data-v=(key(b.weight)) { (num(b.weight)) }
                        td data-v=(key(b.mean_p)) { (num(b.mean_p)) }
                        td data-v=(key(b.frac_pos)) { (num(b.frac_pos)) }
                        td { (interval(b.frac_pos_lower, b.frac_pos_upper)) }
                        td data-v=(key(gap(b))) { (num(gap(b))) }
                        td data-v=(key(share(i))) { (share(i).map(|s| format!("{:.1}%", 100.0 * s)).unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

fn day_table(model: &ModelData) -> Markup {
    let cell = |value: Option<f64>, alert: bool| {
        html! { td class=[alert.then_some("alert")] data-v=(key(value)) { (num(value)) @if alert { " ▲" } } }
    };
    html! {
        table.sortable {
            thead { tr {
                th { "day" } th { "rows" } th { "ECE" } th { "ECE 7d" } th { "ratio" } th { "ratio 7d" }
                th { "log loss" } th { "log loss 7d" }
            } }
            tbody {
                @for d in &model.daily {
                    tr {
                        td { (d.day) }
                        td data-v=(d.rows) { (count(d.rows)) }
                        (cell(d.ece, d.ece_alert)) (cell(d.ece_7d, false))
                        (cell(d.ratio, d.ratio_alert)) (cell(d.ratio_7d, false))
                        (cell(d.logloss, d.logloss_alert)) (cell(d.logloss_7d, false))
                    }
                }
            }
        }
    }
}

fn segment_table(field: &super::data::FieldSegments) -> Markup {
    html! {
        table.sortable {
            thead { tr {
                th { "value" } th { "rows" } th { "weight" } th { "ratio" } th { "95% interval" }
                th { "Holm-adjusted p" } th { "significant" }
            } }
            tbody {
                @for s in &field.segments {
                    tr {
                        td {
                            @if s.other { em { "other (" (count(s.values)) " values)" } }
                            @else if let Some(value) = &s.value { (value) }
                            @else { em { "NULL" } }
                        }
                        td data-v=(s.rows) { (count(s.rows)) }
                        td data-v=(key(s.weight)) { (num(s.weight)) }
                        td data-v=(key(s.ratio)) { (num(s.ratio)) }
                        td { (interval(s.ratio_lower, s.ratio_upper)) }
                        td data-v=(key(s.p_adjusted)) { (num(s.p_adjusted)) }
                        td class=[s.significant.then_some("sig")] { @if s.significant { "yes" } @else { "no" } }
                    }
                }
            }
        }
    }
}

fn appendix(data: &ReportData, json: &str) -> Markup {
    html! {
        section id="appendix" {
            h2 { "Appendix" }
            h3 { "Definitions" }
            dl.meta {
                dt { "Calibration ratio" }
                dd { "Σ w·p / Σ w·y: above 1 the model over-predicts. Interval: the 95% Wilson interval of the observed rate Σ w·y / Σ w with the Kish effective size (Σw)²/Σw², mapped through mean p / rate." }
                dt { "ECE" }
                dd { "Σ over bins of (bin weight / total weight) · |observed rate − mean p| (ece()); uniform bins are [k/M, (k+1)/M), equal-mass bins hold as many rows each." }
                dt { "MCE" } dd { "The largest |observed rate − mean p| over non-empty bins (mce())." }
                dt { "Field-RCE" } dd { "Per value of the field, |Σ w(y − p)| / (Σ w·y + 0.01·N) weighted by the value's share (field_rce())." }
                dt { "Log loss, normalized entropy" } dd { "Mean −[y ln p + (1−y) ln(1−p)]; divided by the entropy of the base rate (below 1 beats predicting the base rate)." }
                dt { "Brier, AUC" } dd { "Mean (y − p)²; the probability that a positive scores above a negative, ties one half." }
                dt { "Spiegelhalter's test" } dd { "z = Σ w(y − p)(1 − 2p) / √(Σ w²(1 − 2p)² p(1 − p)), two-sided p-value (spiegelhalter(), as R rms::val.prob): a small p-value says the predictions are miscalibrated." }
                dt { "Intercept, slope, calibration-in-the-large" } dd { "The logistic recalibration logit P(y) = a + b · logit(p): intercept a and slope b (perfect: 0 and 1); calibration-in-the-large: a with the slope fixed at 1 (calibration_slope(), as a binomial GLM); interval ± 1.96 standard errors." }
                dt { "CORP decomposition" } dd { "The Brier score split by isotonic recalibration: miscalibration (what recalibrating would save), discrimination (what the recalibrated model gains over the base rate) and uncertainty (the base rate's score); Brier = miscalibration − discrimination + uncertainty (calibration_decomposition())." }
                dt { "ECE and AUC intervals" } dd { "ECE: the 2.5% and 97.5% quantiles of 200 Poisson-bootstrap replicates whose row weights come from a hash of the row's key (ece_interval()); AUC: DeLong's interval (auc_interval())." }
                dt { "Paired comparison" } dd { "On the rows two models share by key: the ECE difference with the same bootstrap weights for both (ece_diff_interval()), and DeLong's paired test of the AUCs (auc_test())." }
                dt { "Segment significance" } dd { "Per value, the Wilson deviation score of the observed rate from the mean prediction and its two-sided p-value, Holm-adjusted over all the field's values (field_bias())." }
                dt { "Status" }
                dd {
                    "alert: |ratio − 1| > " (ALERT_RATIO) " with its interval leaving out 1, or the last day breaks the drift rule; "
                    "warn: |ratio − 1| > " (WARN_RATIO) " with its interval leaving out 1, ECE above " (WARN_RELATIVE_ECE)
                    " of the observed rate, or an earlier day breaks the drift rule; ok: otherwise."
                }
            }
            h3 { "Query" }
            pre { code { (data.sql) } }
            h3 { "SQL of every number" }
            @for query in &data.queries {
                h4 { (query.section) }
                pre { code { (query.sql) } }
            }
            h3 { "Data" }
            p { "All numbers of this page, as JSON (docs/report.md describes the schema), are in the script element "
                code { "calibsql-data" } "." }
            script type="application/json" id="calibsql-data" { (PreEscaped(json)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(None), "n/a");
        assert_eq!(num(Some(0.012345)), "0.01235");
        assert_eq!(num(Some(1.0)), "1.000");
        assert_eq!(num(Some(123456.7)), "123457");
        assert_eq!(num(Some(2.5e15)), "2.500e15");
        assert_eq!(num(Some(1.019e-10)), "1.019e-10");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(12), "12");
    }
}
