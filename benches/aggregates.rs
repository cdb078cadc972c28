//! Criterion benches of the hot aggregates on 8,192-row batches, with and without NULLs,
//! through the row accumulator (no GROUP BY) and the grouped accumulator (1,000 groups), and
//! the fits' hot loop on their grid (`fit_gaussian_calib/grid_update_8192_rows`).
//! `cargo bench --bench aggregates`

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::Schema;

#[path = "../tests/support/mod.rs"]
mod support;

const N: usize = 8192;

fn batch(with_nulls: bool) -> RecordBatch {
    let null = |i: usize| with_nulls && i.is_multiple_of(10);
    let p: Float64Array = (0..N)
        .map(|i| (!null(i)).then(|| ((i * 7919) % 1000) as f64 / 1000.0))
        .collect();
    let y: Float64Array = (0..N)
        .map(|i| Some((i * 31).is_multiple_of(7) as i64 as f64))
        .collect();
    let q: Float64Array = (0..N)
        .map(|i| Some(0.05 + (i % 90) as f64 / 100.0))
        .collect();
    let f: Int64Array = (0..N).map(|i| Some(((i * i) % 500) as i64)).collect();
    RecordBatch::try_from_iter(vec![
        ("p", Arc::new(p) as ArrayRef),
        ("y", Arc::new(y)),
        ("q", Arc::new(q)),
        ("f", Arc::new(f)),
    ])
    .unwrap()
}

fn bench(c: &mut Criterion) {
    for with_nulls in [false, true] {
        let b = batch(with_nulls);
        let schema: Arc<Schema> = b.schema();
        for (name, cols) in [
            ("ece", &["p", "y"][..]),
            ("mce", &["p", "y"][..]),
            ("reliability", &["p", "y"][..]),
            ("logloss", &["p", "y"][..]),
            ("brier", &["p", "y"][..]),
            ("ips_logloss", &["p", "y", "q"][..]),
            ("field_ece", &["p", "y", "f"][..]),
            ("field_rce", &["p", "y", "f"][..]),
        ] {
            let call = support::UdafCall::columns(name, Arc::clone(&schema), cols);
            let values: Vec<ArrayRef> = cols
                .iter()
                .map(|c| Arc::clone(b.column_by_name(c).unwrap()))
                .collect();
            let tag = if with_nulls { "nulls" } else { "no_nulls" };
            c.bench_function(&format!("{name}/{tag}"), |bench| {
                bench.iter(|| {
                    let mut acc = call.accumulator();
                    acc.update_batch(&values).unwrap();
                    acc.evaluate().unwrap()
                })
            });
            let groups: Vec<usize> = (0..N).map(|i| i % 1000).collect();
            c.bench_function(&format!("{name}/{tag}/1000_groups"), |bench| {
                bench.iter(|| {
                    let mut acc = call.groups_accumulator();
                    acc.update_batch(&values, &groups, None, 1000).unwrap();
                    acc.evaluate(datafusion::logical_expr::EmitTo::All).unwrap()
                })
            });
        }
    }
}

/// The fits' hot loop: an accumulator already past its exact cap (on the grid), fed 8,192
/// rows of distinct logit-like scores in [-14, 14] per iteration, as in a fit over a big log.
fn bench_fit_grid(c: &mut Criterion) {
    let make = |seed: usize| -> RecordBatch {
        let u = |i: usize, k: usize| ((i * k + seed) % 1_000_003) as f64 / 1_000_003.0;
        let s: Float64Array = (0..N)
            .map(|i| {
                let p = u(i, 2654435761).clamp(1e-6, 1.0 - 1e-6);
                Some((p / (1.0 - p)).ln() + 0.5 * u(i, 40503))
            })
            .collect();
        let y: Float64Array = (0..N)
            .map(|i| Some((u(i, 7919) < 0.1) as i64 as f64))
            .collect();
        let q: Float64Array = (0..N).map(|i| Some(0.1 + 0.9 * u(i, 69069))).collect();
        RecordBatch::try_from_iter(vec![
            ("s", Arc::new(s) as ArrayRef),
            ("y", Arc::new(y)),
            ("q", Arc::new(q)),
        ])
        .unwrap()
    };
    let b = make(0);
    let mut acc = support::UdafCall::columns("fit_gaussian_calib", b.schema(), &["s", "y", "q"])
        .accumulator();
    for seed in 1..20 {
        acc.update_batch(make(seed * 7).columns()).unwrap();
    }
    c.bench_function("fit_gaussian_calib/grid_update_8192_rows", |bench| {
        bench.iter(|| acc.update_batch(b.columns()).unwrap())
    });
}

criterion_group!(benches, bench, bench_fit_grid);
criterion_main!(benches);
