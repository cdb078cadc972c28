//! The probability distributions the metrics and tests use: the standard normal's quantile and
//! the chi-square survival function from `statrs`, the normal CDF from `libm`'s `erfc` (to the
//! last digit or two of scipy's, where statrs's is good to about 1e-10 relative).

use statrs::distribution::{ChiSquared, ContinuousCDF, Normal};

fn standard_normal() -> Normal {
    Normal::standard()
}

/// The standard normal quantile Φ⁻¹(p): −∞ at p ≤ 0, +∞ at p ≥ 1, NaN for NaN.
pub fn normal_quantile(p: f64) -> f64 {
    if p.is_nan() {
        return f64::NAN;
    }
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    standard_normal().inverse_cdf(p)
}

/// The standard normal CDF Φ(x) = erfc(−x/√2)/2.
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// The two-sided p-value of a standard normal statistic z: 2Φ(−|z|), NaN for NaN.
pub fn two_sided_p(z: f64) -> f64 {
    if z.is_nan() {
        return f64::NAN;
    }
    (2.0 * normal_cdf(-z.abs())).min(1.0)
}

/// The chi-square survival function P(X > x) with `df` degrees of freedom; NaN when `df`
/// is not positive or either value is NaN.
pub fn chi_square_sf(x: f64, df: f64) -> f64 {
    if x.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    match ChiSquared::new(df) {
        Ok(d) => d.sf(x.max(0.0)),
        Err(_) => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantile_matches_scipy() {
        // scipy.stats.norm.ppf (scipy 1.x), printed with repr().
        let cases = [
            (0.975, 1.959963984540054),
            (0.95, 1.6448536269514722),
            (0.5, 0.0),
            (0.025, -1.959963984540054),
            (0.995, 2.5758293035489004),
            (1e-10, -6.361340902404056),
            (0.3, -0.5244005127080409),
        ];
        for (p, want) in cases {
            let got = normal_quantile(p);
            assert!(
                (got - want).abs() <= 1e-15 * want.abs().max(1.0),
                "ppf({p}) = {got}, scipy {want}"
            );
        }
    }
}

#[cfg(test)]
mod distribution_tests {
    use super::*;

    #[test]
    fn cdf_and_chi_square_match_scipy() {
        // scipy 1.17 `norm.cdf`, `chi2.sf`, printed with repr().
        let close = |got: f64, want: f64| (got - want).abs() <= 1e-14 * want.abs().max(1e-300);
        assert!(close(normal_cdf(1.959963984540054), 0.975));
        assert!(close(normal_cdf(-3.0), 0.0013498980316300933));
        assert!(close(two_sided_p(-1.959963984540054), 0.05));
        assert!(close(
            chi_square_sf(15.507313055865453, 8.0),
            0.050000000000000024
        ));
        assert!(close(chi_square_sf(3.0, 2.0), 0.22313016014842982));
        assert!(chi_square_sf(1.0, 0.0).is_nan());
        assert!(two_sided_p(f64::NAN).is_nan());
    }
}
