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

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use datafusion::arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array, Int8Array};
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;

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
    let mut world = World::new(config.seed, config.exposure);
    world.timeline = Timeline {
        days: config.days,
        rows: [config.valid_rows(), config.test_rows()],
        drift: config.drift,
    };
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

/// Everything drawn once per seed: the catalogue and the field effects.
struct World {
    seed: u64,
    user_effect: Vec<f64>,
    item_effect: Vec<f64>,
    item_exposure: Vec<f64>,
    item_count: Vec<i64>,
    max_count: i64,
    site_cdf: Vec<f64>,
    site_effect: Vec<f64>,
    site_bias: Vec<f64>,
    app_cdf: Vec<f64>,
    app_effect: Vec<f64>,
    app_bias: Vec<f64>,
    ad_type_cdf: Vec<f64>,
    ad_type_bias: Vec<f64>,
    /// `ln f1(x) − ln f0(x)` = `LR_LOG · ln x + LR_LINEAR · x + LR_CONST` for the score's Gamma
    /// densities.
    lr: (f64, f64, f64),
    timeline: Timeline,
}

/// How rows map to days, and the drift to inject.
#[derive(Debug, Clone, Copy)]
struct Timeline {
    days: u32,
    /// Rows of the valid and the test split.
    rows: [u64; 2],
    drift: Option<Drift>,
}

impl Timeline {
    fn day(&self, split: Split, row: u64) -> u32 {
        let n = self.rows[split as usize].max(1);
        ((row as u128 * self.days as u128) / n as u128) as u32
    }
}

impl World {
    fn new(seed: u64, exposure: Exposure) -> World {
        let normals = |key: u64, n: usize, sd: f64| -> Vec<f64> {
            (0..n)
                .map(|i| Rng::new(seed, key, i as u64).normal() * sd)
                .collect()
        };
        let user_effect = normals(11, USERS, USER_SD);
        let item_noise = normals(12, ITEMS, ITEM_SD);
        let popularity: Vec<f64> = (0..ITEMS)
            .map(|i| ((i + 1) as f64).powf(-POPULARITY_ZIPF))
            .collect();
        let mean_log_popularity = popularity.iter().map(|p| p.ln()).sum::<f64>() / ITEMS as f64;
        let item_effect = (0..ITEMS)
            .map(|i| {
                ITEM_POPULARITY_SLOPE * (popularity[i].ln() - mean_log_popularity) + item_noise[i]
            })
            .collect();
        let item_exposure = popularity
            .iter()
            .map(|&p| exposure.probability(p))
            .collect();
        let item_count: Vec<i64> = (0..ITEMS)
            .map(|i| Rng::new(seed, 13, i as u64).poisson(COUNT_SCALE * popularity[i]))
            .collect();
        let max_count = item_count.iter().copied().max().unwrap_or(1).max(1);

        let (k1, theta1) = SCORE_POSITIVE;
        let (k0, theta0) = SCORE_NEGATIVE;
        let lr = (
            k1 - k0,
            1.0 / theta0 - 1.0 / theta1,
            (ln_gamma(k0) + k0 * theta0.ln()) - (ln_gamma(k1) + k1 * theta1.ln()),
        );
        let site_cdf = zipf_cdf(SITES, SITE_ZIPF);
        let app_cdf = zipf_cdf(APPS, APP_ZIPF);
        let ad_type_cdf = cdf(AD_TYPES.iter().map(|(_, p)| *p));
        World {
            seed,
            user_effect,
            item_effect,
            item_exposure,
            item_count,
            max_count,
            site_effect: normals(14, SITES, SITE_SD),
            site_bias: centred(normals(15, SITES, MISCALIBRATION_SITE_SD), &site_cdf),
            app_effect: normals(16, APPS, APP_SD),
            app_bias: centred(normals(17, APPS, MISCALIBRATION_APP_SD), &app_cdf),
            ad_type_bias: centred(MISCALIBRATION_AD_TYPE.to_vec(), &ad_type_cdf),
            site_cdf,
            app_cdf,
            ad_type_cdf,
            lr,
            timeline: Timeline {
                days: DEFAULT_DAYS,
                rows: [0, 0],
                drift: None,
            },
        }
    }

    /// Rows `start .. start + len` of `split`.
    fn batch(
        &self,
        schema: &SchemaRef,
        split: Split,
        start: u64,
        len: usize,
    ) -> anyhow::Result<RecordBatch> {
        let mut row_id = Vec::with_capacity(len);
        let mut user_id = Vec::with_capacity(len);
        let mut item_id = Vec::with_capacity(len);
        let mut site_id = Vec::with_capacity(len);
        let mut app_id = Vec::with_capacity(len);
        let mut ad_type = Vec::with_capacity(len);
        let mut score = Vec::with_capacity(len);
        let mut p_model = Vec::with_capacity(len);
        let mut click = Vec::with_capacity(len);
        let mut item_count = Vec::with_capacity(len);
        let mut true_pref = Vec::with_capacity(len);
        let mut exposure = Vec::with_capacity(len);
        let mut exposed = Vec::with_capacity(len);
        let mut relevant = Vec::with_capacity(len);
        let mut day = Vec::with_capacity(len);
        for row in start..start + len as u64 {
            let r = self.row(split, row);
            day.push(self.timeline.day(split, row) as i32);
            row_id.push(row as i64);
            user_id.push(r.user as i32);
            item_id.push(r.item as i32);
            site_id.push(r.site as i32);
            app_id.push(r.app as i32);
            ad_type.push(AD_TYPES[r.ad_type].0);
            score.push(r.score);
            p_model.push(r.p_model);
            click.push(r.click as i8);
            item_count.push(self.item_count[r.item]);
            true_pref.push(r.true_pref);
            exposure.push(self.item_exposure[r.item]);
            exposed.push(r.exposed as i8);
            relevant.push(r.relevant as i8);
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(row_id)),
            Arc::new(Int32Array::from(user_id)),
            Arc::new(Int32Array::from(item_id)),
            Arc::new(Int32Array::from(site_id)),
            Arc::new(Int32Array::from(app_id)),
            Arc::new(StringArray::from(ad_type)),
            Arc::new(Float64Array::from(score)),
            Arc::new(Float64Array::from(p_model)),
            Arc::new(Int8Array::from(click)),
            Arc::new(Int64Array::from(item_count)),
            Arc::new(Int64Array::from(vec![self.max_count; len])),
            Arc::new(Float64Array::from(true_pref)),
            Arc::new(Float64Array::from(exposure)),
            Arc::new(Int8Array::from(exposed)),
            Arc::new(Int8Array::from(relevant)),
            Arc::new(Int32Array::from(day)),
        ];
        Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
    }

    /// One row, from its own random stream.
    fn row(&self, split: Split, row: u64) -> Row {
        let mut rng = Rng::new(self.seed, split.key(), row);
        let user = rng.below(USERS);
        let item = rng.below(ITEMS);
        let site = pick(&self.site_cdf, rng.uniform());
        let app = pick(&self.app_cdf, rng.uniform());
        let ad_type = pick(&self.ad_type_cdf, rng.uniform());

        // Whether the user likes the item here, then the ranking model's score given that.
        let prior_logit = INTERCEPT
            + self.user_effect[user]
            + self.item_effect[item]
            + self.site_effect[site]
            + self.app_effect[app]
            + AD_TYPE_EFFECT[ad_type];
        let relevant = rng.uniform() < sigmoid(prior_logit);
        let (shape, scale) = if relevant {
            SCORE_POSITIVE
        } else {
            SCORE_NEGATIVE
        };
        let x = rng.gamma(shape, scale);
        // P(R = 1 | everything the row knows) by Bayes' rule: prior odds × likelihood ratio.
        let (lr_log, lr_linear, lr_const) = self.lr;
        let true_logit = prior_logit + lr_log * x.ln() + lr_linear * x + lr_const;
        let true_pref = sigmoid(true_logit);

        let omega = self.item_exposure[item];
        let exposed = match split {
            Split::Valid => rng.uniform() < omega,
            Split::Test => true,
        };
        // The CTR model predicts this row's click from the user, the item and the ad context
        // (not from the ranking score): exposure × prior preference in the logged traffic,
        // the prior preference alone in the randomised one; it is off by a per-field factor.
        let prior = sigmoid(prior_logit);
        let p_click = match split {
            Split::Valid => omega * prior,
            Split::Test => prior,
        };
        let noise = MISCALIBRATION_NOISE_SD * rng.normal()
            - 0.5 * MISCALIBRATION_NOISE_SD * MISCALIBRATION_NOISE_SD;
        let offset = self.site_bias[site] + self.app_bias[app] + self.ad_type_bias[ad_type];
        let mut p_model = (p_click * (offset + noise).exp()).min(P_MODEL_MAX);
        if let Some(drift) = self.timeline.drift {
            if self.timeline.day(split, row) >= drift.from_day {
                p_model = (p_model * drift.factor).min(P_MODEL_MAX);
            }
        }
        Row {
            user,
            item,
            site,
            app,
            ad_type,
            score: x - SCORE_SHIFT,
            p_model,
            click: exposed && relevant,
            true_pref,
            exposed,
            relevant,
        }
    }
}

struct Row {
    user: usize,
    item: usize,
    site: usize,
    app: usize,
    ad_type: usize,
    score: f64,
    p_model: f64,
    click: bool,
    true_pref: f64,
    exposed: bool,
    relevant: bool,
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Cumulative, normalised weights.
fn cdf(weights: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut total = 0.0;
    let mut cdf: Vec<f64> = weights
        .map(|w| {
            total += w;
            total
        })
        .collect();
    for c in &mut cdf {
        *c /= total;
    }
    if let Some(last) = cdf.last_mut() {
        *last = 1.0;
    }
    cdf
}

/// Log-factors `values` shifted so that `exp(value)` has mean 1 under the probabilities of
/// `cdf`.
fn centred(mut values: Vec<f64>, cdf: &[f64]) -> Vec<f64> {
    let mut previous = 0.0;
    let mut mean = 0.0;
    for (value, c) in values.iter().zip(cdf) {
        mean += value.exp() * (c - previous);
        previous = *c;
    }
    let shift = mean.ln();
    for value in &mut values {
        *value -= shift;
    }
    values
}

/// Zipf frequencies `1 / rank^exponent` over `n` values, as a CDF.
fn zipf_cdf(n: usize, exponent: f64) -> Vec<f64> {
    cdf((1..=n).map(|r| (r as f64).powf(-exponent)))
}

/// The index whose CDF interval holds `u` ∈ [0, 1).
fn pick(cdf: &[f64], u: f64) -> usize {
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7; 15 digits).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// A SplitMix64 stream starting at a point hashed from (seed, key, index): independent
/// streams per row, item or field value, reproducible on any platform.
struct Rng {
    state: u64,
    spare_normal: Option<f64>,
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    fn new(seed: u64, key: u64, index: u64) -> Rng {
        let state = mix64(mix64(mix64(seed ^ GOLDEN).wrapping_add(key)).wrapping_add(index));
        Rng {
            state,
            spare_normal: None,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// Uniform in [0, 1), 53 random bits.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1).
    fn open_uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below 2⁻⁴⁰ for the sizes used here).
    fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Standard normal (Box–Muller, both values used).
    fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare_normal.take() {
            return z;
        }
        let radius = (-2.0 * self.open_uniform().ln()).sqrt();
        let angle = 2.0 * std::f64::consts::PI * self.uniform();
        self.spare_normal = Some(radius * angle.sin());
        radius * angle.cos()
    }

    /// Gamma(shape, scale) for shape ≥ 1 (Marsaglia–Tsang).
    fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        debug_assert!(shape >= 1.0);
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.open_uniform();
            if u < 1.0 - 0.0331 * x * x * x * x || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
                return d * v * scale;
            }
        }
    }

    /// Poisson(mean): inversion for small means, the rounded normal approximation above 50.
    fn poisson(&mut self, mean: f64) -> i64 {
        if mean > 50.0 {
            return (mean + mean.sqrt() * self.normal()).round().max(0.0) as i64;
        }
        let limit = (-mean).exp();
        let mut k = 0;
        let mut product = self.uniform();
        while product > limit {
            k += 1;
            product *= self.uniform();
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_gamma_matches_factorials() {
        for (n, factorial) in [(1.0, 1.0), (2.0, 1.0), (4.0, 6.0), (6.0, 120.0)] {
            assert!((ln_gamma(n) - f64::ln(factorial)).abs() < 1e-12, "{n}");
        }
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }

    #[test]
    fn samplers_have_the_right_moments() {
        let mut rng = Rng::new(7, 0, 0);
        let n = 200_000;
        let (mut sum, mut sum_sq) = (0.0, 0.0);
        for _ in 0..n {
            let x = rng.gamma(4.0, 1.5);
            sum += x;
            sum_sq += x * x;
        }
        let mean = sum / n as f64;
        let var = sum_sq / n as f64 - mean * mean;
        assert!((mean - 6.0).abs() < 0.03, "gamma mean {mean}");
        assert!((var - 9.0).abs() < 0.15, "gamma variance {var}");
        let mean = (0..n).map(|_| rng.poisson(3.0) as f64).sum::<f64>() / n as f64;
        assert!((mean - 3.0).abs() < 0.02, "poisson mean {mean}");
    }

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

    #[test]
    fn picks_follow_the_cdf() {
        let cdf = cdf([1.0, 1.0, 2.0].into_iter());
        assert_eq!(pick(&cdf, 0.0), 0);
        assert_eq!(pick(&cdf, 0.26), 1);
        assert_eq!(pick(&cdf, 0.5), 2);
        assert_eq!(pick(&cdf, 0.999), 2);
    }
}
