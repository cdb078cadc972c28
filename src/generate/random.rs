//! Seeded random streams (one per row, keyed by seed, split and row number) and the
//! samplers and distributions the world draws from.

pub(super) use calibsql_udfs::scalars::sigmoid;

/// Cumulative, normalised weights.
pub(super) fn cdf(weights: impl Iterator<Item = f64>) -> Vec<f64> {
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
pub(super) fn centred(mut values: Vec<f64>, cdf: &[f64]) -> Vec<f64> {
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
pub(super) fn zipf_cdf(n: usize, exponent: f64) -> Vec<f64> {
    cdf((1..=n).map(|r| (r as f64).powf(-exponent)))
}

/// The index whose CDF interval holds `u` ∈ [0, 1).
pub(super) fn pick(cdf: &[f64], u: f64) -> usize {
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
}

/// A SplitMix64 stream starting at a point hashed from (seed, key, index): independent
/// streams per row, item or field value, reproducible on any platform.
pub(super) struct Rng {
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
    pub(super) fn new(seed: u64, key: u64, index: u64) -> Rng {
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
    pub(super) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1).
    pub(super) fn open_uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below 2⁻⁴⁰ for the sizes used here).
    pub(super) fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Standard normal (Box–Muller, both values used).
    pub(super) fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare_normal.take() {
            return z;
        }
        let radius = (-2.0 * self.open_uniform().ln()).sqrt();
        let angle = 2.0 * std::f64::consts::PI * self.uniform();
        self.spare_normal = Some(radius * angle.sin());
        radius * angle.cos()
    }

    /// Gamma(shape, scale) for shape ≥ 1 (Marsaglia–Tsang).
    pub(super) fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
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
    pub(super) fn poisson(&mut self, mean: f64) -> i64 {
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
    fn picks_follow_the_cdf() {
        let cdf = cdf([1.0, 1.0, 2.0].into_iter());
        assert_eq!(pick(&cdf, 0.0), 0);
        assert_eq!(pick(&cdf, 0.26), 1);
        assert_eq!(pick(&cdf, 0.5), 2);
        assert_eq!(pick(&cdf, 0.999), 2);
    }
}
