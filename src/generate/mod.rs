//! Synthetic event logs whose truth is known: `calibsql generate` and `calibsql demo`.
//!
//! Each row is one user–item pair shown with an ad context, simulating the settings of the
//! papers calibsql implements:
//!
//! - **Missing-not-at-random implicit feedback** (Kweon et al., AAAI 2022; Liang 2016): a user
//!   likes an item with probability `true_pref = P(R = 1)`, sees it with probability
//!   `exposure = ω_item` that grows with the item's (Zipf) popularity, and the biased
//!   **valid** split logs `click = O·R` with `O ~ Bernoulli(ω)`. The **test** split shows items
//!   uniformly at random (`O = 1`, `click = R`), like the Yahoo!R3 and Coat test sets.
//! - **A ranking model's raw score**: unbounded above, drawn from class-conditional Gamma
//!   distributions with different shape and spread for liked and not-liked pairs (the shapes of
//!   Kweon et al., Figure 2), so `true_pref` is the Bayes posterior given the score.
//! - **A CTR model's probability** `p_model`, miscalibrated differently per `site_id` (thousands
//!   of Zipf-distributed values), `app_id` and `ad_type` (Pan et al., WWW 2020; Zhao et al.,
//!   ConfCalib).
//!
//! The hidden truth (`true_pref`, `exposure`, `exposed`, `relevant`) stays in the rows so
//! reports and tests can score against it. `docs/DATA.md` documents every column.
//!
//! Generation is deterministic for a seed: every row draws from its own random stream keyed by
//! (seed, split, row number), so the files do not depend on threads or batch size. It streams:
//! each worker holds one batch and one Parquet row group, whatever the row count.
//!
//! The parts: this module (the settings, the schema and the parallel writer), `world` (the
//! simulated users, items, sites and their rows), `random` (the seeded random streams and
//! samplers).

mod random;
mod world;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;

use world::World;

/// The seed `generate` and `demo` use unless told otherwise.
pub const DEFAULT_SEED: u64 = 42;

/// Users in the catalogue.
pub const USERS: usize = 20_000;
/// Items in the catalogue; item 0 is the most popular, item `ITEMS − 1` the least.
pub const ITEMS: usize = 2_000;
/// Distinct `site_id` values (drawn Zipf-distributed, exponent [`SITE_ZIPF`]).
pub const SITES: usize = 5_000;
/// Distinct `app_id` values (drawn Zipf-distributed, exponent [`APP_ZIPF`]).
pub const APPS: usize = 200;
/// Zipf exponent of the site frequencies.
pub const SITE_ZIPF: f64 = 1.05;
/// Zipf exponent of the app frequencies.
pub const APP_ZIPF: f64 = 1.0;
/// The `ad_type` values and how often each is drawn.
pub const AD_TYPES: [(&str, f64); 5] = [
    ("banner", 0.40),
    ("native", 0.25),
    ("video", 0.15),
    ("interstitial", 0.12),
    ("rewarded", 0.08),
];

/// Item popularity is Zipf-like: `popularity = (item_id + 1)^−POPULARITY_ZIPF`, 1 for item 0.
pub const POPULARITY_ZIPF: f64 = 0.6;
/// Scale of the item popularity counts: `item_count ~ Poisson(COUNT_SCALE · popularity)`, the
/// clicks each item received in an earlier (simulated) log.
pub const COUNT_SCALE: f64 = 20_000.0;
/// Exposure probability of the default (strong) scenario: `ω = max(popularity^EXPOSURE_POWER,
/// EXPOSURE_FLOOR)`. The floor equals the default `clip` of the UERM fits, so IPS with the
/// true exposure is unbiased.
pub const EXPOSURE_FLOOR: f64 = 0.1;
/// See [`EXPOSURE_FLOOR`]. The popularity estimate `popularity_propensity(item_count,
/// max_count)` ≈ `max(popularity^0.5, 0.1)` has the right form but the wrong exponent: it is
/// never below the truth, so IPS with it corrects the bias only in part.
pub const EXPOSURE_POWER: f64 = 2.0 / 3.0;
/// Exposure of the mild scenario (`--exposure mild`): `ω = max(popularity^MILD_EXPOSURE_POWER,
/// MILD_EXPOSURE_FLOOR)`, between 0.9 and 1: one click in ten goes missing instead of nine in
/// ten, so the calibrators' shapes, not the bias, make the differences between them (under
/// the strong bias every bin of every naive fit under-predicts, and their ECEs are equal).
pub const MILD_EXPOSURE_FLOOR: f64 = 0.9;
/// See [`MILD_EXPOSURE_FLOOR`].
pub const MILD_EXPOSURE_POWER: f64 = 1.0 / 20.0;

/// How strongly the valid split's clicks are missing not at random.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Exposure {
    /// `ω = max(popularity^(2/3), 0.1)`: about 1 click in 9 of the test split's rate survives.
    #[default]
    Strong,
    /// `ω = max(popularity^(1/20), 0.9)`: about 9 clicks in 10 survive.
    Mild,
}

impl Exposure {
    /// The exposure probability of an item of `popularity`.
    pub fn probability(self, popularity: f64) -> f64 {
        match self {
            Exposure::Strong => popularity.powf(EXPOSURE_POWER).max(EXPOSURE_FLOOR),
            Exposure::Mild => popularity
                .powf(MILD_EXPOSURE_POWER)
                .max(MILD_EXPOSURE_FLOOR),
        }
    }
}

/// Log-odds of liking, `logit P(R = 1) = INTERCEPT + user + item + site + app + ad_type`.
pub const INTERCEPT: f64 = -2.45;
/// Spread (sd) of the user effect on the log-odds of liking.
pub const USER_SD: f64 = 0.5;
/// Slope of the item effect in log popularity: popular items are liked more.
pub const ITEM_POPULARITY_SLOPE: f64 = 0.25;
/// Spread (sd) of the rest of the item effect.
pub const ITEM_SD: f64 = 0.4;
/// Spread (sd) of the true site effect on the log-odds of liking.
pub const SITE_SD: f64 = 0.3;
/// Spread (sd) of the true app effect.
pub const APP_SD: f64 = 0.2;
/// True ad_type effects, in the order of [`AD_TYPES`].
pub const AD_TYPE_EFFECT: [f64; 5] = [0.0, 0.1, -0.2, 0.3, -0.1];

/// Ranking score `score = X − SCORE_SHIFT` with `X ~ Gamma(shape, scale)` given the label:
/// (shape, scale) for R = 1 …
pub const SCORE_POSITIVE: (f64, f64) = (4.0, 1.5);
/// … and for R = 0 (narrower and more skewed).
pub const SCORE_NEGATIVE: (f64, f64) = (2.0, 1.0);
/// See [`SCORE_POSITIVE`].
pub const SCORE_SHIFT: f64 = 3.0;

/// CTR model miscalibration, a factor `exp(offset)` on the predicted probability: per-site
/// offsets (sd) …
pub const MISCALIBRATION_SITE_SD: f64 = 0.35;
/// … per-app offsets (sd) …
pub const MISCALIBRATION_APP_SD: f64 = 0.45;
/// … per-ad_type offsets, in the order of [`AD_TYPES`] …
pub const MISCALIBRATION_AD_TYPE: [f64; 5] = [0.45, -0.35, 0.65, -0.5, 0.2];
/// … and per-row noise (sd). Each field's factors are normalised to a mean of 1 over rows (and
/// the noise's too), so the model is calibrated overall yet miscalibrated per field value: the
/// situation of Pan et al.'s field-level calibration.
pub const MISCALIBRATION_NOISE_SD: f64 = 0.2;

/// The largest `p_model` (a factor can push a prediction past 1; it is capped, rarely).
pub const P_MODEL_MAX: f64 = 0.99;

/// The two splits, in the order they are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Biased: items exposed with probability ω, `click = exposed · relevant`.
    Valid,
    /// Unbiased: items shown uniformly at random, `click = relevant`.
    Test,
}

impl Split {
    /// The directory name under the output directory.
    pub fn name(self) -> &'static str {
        match self {
            Split::Valid => "valid",
            Split::Test => "test",
        }
    }

    fn key(self) -> u64 {
        match self {
            Split::Valid => 1,
            Split::Test => 2,
        }
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct Config {
    /// Rows in all: the valid split gets the larger half, the test split the rest.
    pub rows: u64,
    pub seed: u64,
    /// Rows per record batch (and per Parquet row group).
    pub batch_rows: usize,
    /// Rows per `part-*.parquet` file.
    pub rows_per_file: u64,
    /// Worker threads (the output does not depend on it).
    pub threads: usize,
    /// Set it to stop early: [`generate`] then fails with "cancelled" within a batch's time,
    /// leaving the files written so far.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Days the log spans: each split's rows are in time order, day `row · days / rows`.
    pub days: u32,
    /// Calibration drift injected from a day on (none by default).
    pub drift: Option<Drift>,
    /// How strongly exposure biases the valid split's clicks.
    pub exposure: Exposure,
}

/// Drift injected into the CTR model: from `from_day` on, its predictions are multiplied by
/// `factor` (capped at 0.99) while the clicks stay as they were, as when the click rate falls
/// (a season, a change of layout) and the model is not retrained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    pub from_day: u32,
    pub factor: f64,
}

/// Default number of days of a generated log.
pub const DEFAULT_DAYS: u32 = 14;

impl Config {
    /// `rows` rows with the default seed, batch and file sizes, one worker per core.
    pub fn new(rows: u64) -> Config {
        Config {
            rows,
            seed: DEFAULT_SEED,
            batch_rows: 65_536,
            rows_per_file: 1 << 20,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cancel: None,
            days: DEFAULT_DAYS,
            drift: None,
            exposure: Exposure::Strong,
        }
    }

    /// Rows of the valid split (the larger half).
    pub fn valid_rows(&self) -> u64 {
        self.rows - self.rows / 2
    }

    /// Rows of the test split.
    pub fn test_rows(&self) -> u64 {
        self.rows / 2
    }
}

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct Summary {
    pub valid_rows: u64,
    pub test_rows: u64,
    /// `DIR/valid` and `DIR/test`.
    pub valid_dir: PathBuf,
    pub test_dir: PathBuf,
    pub files: usize,
    pub elapsed: Duration,
}

/// The Arrow schema of every file, in column order.
pub fn schema() -> SchemaRef {
    let field = |name: &str, data_type: DataType| Field::new(name, data_type, false);
    Arc::new(Schema::new(vec![
        field("row_id", DataType::Int64),
        field("user_id", DataType::Int32),
        field("item_id", DataType::Int32),
        field("site_id", DataType::Int32),
        field("app_id", DataType::Int32),
        field("ad_type", DataType::Utf8),
        field("score", DataType::Float64),
        field("p_model", DataType::Float64),
        field("click", DataType::Int8),
        field("item_count", DataType::Int64),
        field("max_count", DataType::Int64),
        field("true_pref", DataType::Float64),
        field("exposure", DataType::Float64),
        field("exposed", DataType::Int8),
        field("relevant", DataType::Int8),
        field("day", DataType::Int32),
    ]))
}

/// Writes `DIR/valid/part-NNNNN.parquet` and `DIR/test/part-NNNNN.parquet` for `config`,
/// replacing `part-*.parquet` files a previous run left there. `progress` is called now and
/// then from the calling thread with the rows written so far (of `config.rows`).
pub fn generate(
    out: &Path,
    config: &Config,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<Summary> {
    if config.batch_rows == 0 || config.rows_per_file == 0 {
        bail!("batch_rows and rows_per_file must be at least 1");
    }
    let started = Instant::now();
    if config.days == 0 {
        bail!("days must be at least 1");
    }
    if let Some(drift) = config.drift {
        if drift.from_day >= config.days {
            bail!(
                "--drift-day {} is past the last day ({}; days are 0 to --days − 1): no row would drift",
                drift.from_day,
                config.days - 1
            );
        }
    }
    let world = World::new(config.seed, config.exposure).with_timeline(
        config.days,
        [config.valid_rows(), config.test_rows()],
        config.drift,
    );
    let schema = schema();

    // Every file to write: (split, file number, first row, rows).
    let mut jobs = Vec::new();
    for (split, rows) in [
        (Split::Valid, config.valid_rows()),
        (Split::Test, config.test_rows()),
    ] {
        let dir = out.join(split.name());
        prepare_dir(&dir)?;
        let mut start = 0;
        let mut number = 0;
        while start < rows {
            let len = config.rows_per_file.min(rows - start);
            jobs.push(Job {
                split,
                path: dir.join(format!("part-{number:05}.parquet")),
                start,
                len,
            });
            start += len;
            number += 1;
        }
    }

    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let threads = config.threads.clamp(1, jobs.len().max(1));
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for _ in 0..threads {
            workers.push(scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    break;
                }
                if let Err(error) = write_file(&world, &schema, job, config, &done) {
                    let mut failure = failure.lock().unwrap_or_else(|p| p.into_inner());
                    failure.get_or_insert(error);
                    break;
                }
            }));
        }
        while workers.iter().any(|w| !w.is_finished()) {
            progress(done.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    if let Some(error) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(error);
    }
    progress(done.load(Ordering::Relaxed));
    Ok(Summary {
        valid_rows: config.valid_rows(),
        test_rows: config.test_rows(),
        valid_dir: out.join(Split::Valid.name()),
        test_dir: out.join(Split::Test.name()),
        files: jobs.len(),
        elapsed: started.elapsed(),
    })
}

/// Creates `dir` or removes the `part-*.parquet` files in it.
fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for entry in fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("part-") && name.ends_with(".parquet") {
            fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(())
}

struct Job {
    split: Split,
    path: PathBuf,
    start: u64,
    len: u64,
}

fn write_file(
    world: &World,
    schema: &SchemaRef,
    job: &Job,
    config: &Config,
    done: &AtomicU64,
) -> anyhow::Result<()> {
    let file =
        File::create(&job.path).with_context(|| format!("cannot create {}", job.path.display()))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(config.batch_rows))
        .build();
    let mut writer = ArrowWriter::try_new(file, Arc::clone(schema), Some(properties))?;
    let mut offset = 0;
    while offset < job.len {
        if config
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            bail!("cancelled");
        }
        let len = (config.batch_rows as u64).min(job.len - offset);
        let batch = world.batch(schema, job.split, job.start + offset, len as usize)?;
        writer
            .write(&batch)
            .with_context(|| format!("cannot write {}", job.path.display()))?;
        offset += len;
        done.fetch_add(len, Ordering::Relaxed);
    }
    writer
        .close()
        .with_context(|| format!("cannot write {}", job.path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_depend_only_on_seed_split_and_number() {
        let world = World::new(5, Exposure::Strong);
        let schema = schema();
        let whole = world.batch(&schema, Split::Valid, 0, 100).unwrap();
        let tail = world.batch(&schema, Split::Valid, 60, 40).unwrap();
        assert_eq!(whole.slice(60, 40), tail);
        let other = World::new(6, Exposure::Strong)
            .batch(&schema, Split::Valid, 60, 40)
            .unwrap();
        assert_ne!(other, tail);
    }
}
