//! The simulated world: users, items, sites and apps drawn once per seed, and the rows of a
//! split drawn from them, each from its own random stream.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array, Int8Array};
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;

use super::random::{cdf, centred, pick, sigmoid, zipf_cdf, Rng};
use super::*;

/// Everything drawn once per seed: the catalogue and the field effects.
pub(super) struct World {
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
    /// The world with rows spread over `days` days (`rows` of the valid and the test
    /// split) and `drift` injected.
    pub(super) fn with_timeline(self, days: u32, rows: [u64; 2], drift: Option<Drift>) -> World {
        World {
            timeline: Timeline { days, rows, drift },
            ..self
        }
    }

    pub(super) fn new(seed: u64, exposure: Exposure) -> World {
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
            (libm::lgamma(k0) + k0 * theta0.ln()) - (libm::lgamma(k1) + k1 * theta1.ln()),
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
    pub(super) fn batch(
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
