//! A model's status badge: OK, warn or alert, from documented thresholds (docs/report.md
//! "Status"). The ratio's thresholds only count when its interval leaves out 1, so a small
//! sample is not flagged for noise; the drift rule is that of sql/monitoring.sql.

use super::data::{ModelData, Status};

/// |ratio − 1| above which a model is `warn` (its interval leaving out 1).
pub const WARN_RATIO: f64 = 0.05;
/// |ratio − 1| above which a model is `alert` (its interval leaving out 1).
pub const ALERT_RATIO: f64 = 0.10;
/// ECE relative to the observed rate (ECE / (Σ w·y / Σ w)) above which a model is `warn`.
pub const WARN_RELATIVE_ECE: f64 = 0.10;

/// The badge of `model`.
pub fn of(model: &ModelData) -> Status {
    let Some(ratio) = model.ratio else {
        return Status {
            level: "unknown",
            reasons: vec!["the calibration ratio could not be computed".to_string()],
        };
    };
    let mut level = 0;
    let mut reasons = Vec::new();
    let significant =
        model.ratio_lower.is_some_and(|l| l > 1.0) || model.ratio_upper.is_some_and(|u| u < 1.0);
    let off = (ratio - 1.0).abs();
    if significant && off > ALERT_RATIO {
        level = 2;
        reasons.push(format!(
            "calibration ratio {ratio:.3} is more than {ALERT_RATIO} from 1 and its interval leaves out 1"
        ));
    } else if significant && off > WARN_RATIO {
        level = 1;
        reasons.push(format!(
            "calibration ratio {ratio:.3} is more than {WARN_RATIO} from 1 and its interval leaves out 1"
        ));
    }
    let rate = model.sum_y.zip(model.weight).map(|(y, w)| y / w);
    if let (Some(ece), Some(rate)) = (model.ece, rate) {
        if rate > 0.0 && ece / rate > WARN_RELATIVE_ECE {
            level = level.max(1);
            reasons.push(format!(
                "ECE {ece:.4} is more than {WARN_RELATIVE_ECE} of the observed rate {rate:.4}"
            ));
        }
    }
    if let Some(last) = model.daily.last() {
        if last.ece_alert || last.ratio_alert || last.logloss_alert {
            level = 2;
            reasons.push(format!("the last day, {}, breaks the drift rule", last.day));
        } else if model
            .daily
            .iter()
            .any(|d| d.ece_alert || d.ratio_alert || d.logloss_alert)
        {
            level = level.max(1);
            reasons.push("an earlier day breaks the drift rule".to_string());
        }
    }
    Status {
        level: ["ok", "warn", "alert"][level],
        reasons,
    }
}
