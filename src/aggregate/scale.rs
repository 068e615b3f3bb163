//! Turning a line's value and sample rate into an integer delta without bias.
//!
//! Counter columns hold integers, but StatsD values may be fractional (`1.5|c`) and
//! sampled lines stand for `value / rate` events (`1|c|@0.3` is 3.33 events). Rounding
//! that to the nearest integer would be biased (every `@0.3` line would count 3, losing
//! 10 %). Instead the value is rounded **stochastically**: `floor(x)` plus one with
//! probability `x - floor(x)`, so the expected delta is exactly `x` and the long-run sum
//! converges to the true total. Integer values with rate 1 (the common case) are exact
//! and never touch the random source.
//!
//! Values beyond 2^53 lose precision when divided by a rate, as any `f64` does; values
//! that do not fit an `i64` after scaling are refused (the caller counts them as
//! `bad_value`), never wrapped or clamped.

/// The delta of a whole line: its values summed, each scaled by `1 / rate`. Integer
/// values at full rate are summed exactly; everything else is summed as `f64` and
/// rounded once, so `x:1.5:0.5|c` is exactly 2. `None` if the scaled part is not
/// finite or does not fit an `i64`.
pub fn scale_values(
    values: impl Iterator<Item = crate::line::Value>,
    rate: f64,
    rng: &mut fastrand::Rng,
) -> Option<i128> {
    use crate::line::Value;
    let mut exact: i128 = 0;
    let mut scaled = 0.0_f64;
    let mut any_scaled = false;
    for value in values {
        match value {
            Value::Int(v) if rate == 1.0 => exact += i128::from(v),
            Value::Int(v) => {
                scaled += v as f64 / rate;
                any_scaled = true;
            }
            Value::Float(v) => {
                scaled += v / rate;
                any_scaled = true;
            }
        }
    }
    if any_scaled {
        exact += i128::from(stochastic_round(scaled, rng)?);
    }
    Some(exact)
}

/// `2^63` as an `f64`: the first value above the `i64` range.
const I64_LIMIT: f64 = 9_223_372_036_854_775_808.0;

/// The delta for an integer value sent with `rate` (0 < rate <= 1).
pub fn scale_int(value: i64, rate: f64, rng: &mut fastrand::Rng) -> Option<i64> {
    if rate == 1.0 {
        return Some(value);
    }
    stochastic_round(value as f64 / rate, rng)
}

/// The delta for a fractional value sent with `rate` (0 < rate <= 1).
pub fn scale_float(value: f64, rate: f64, rng: &mut fastrand::Rng) -> Option<i64> {
    stochastic_round(value / rate, rng)
}

/// Rounds `x` to `floor(x)` or `floor(x) + 1` with probabilities that make the expected
/// result equal `x`. `None` when `x` is not finite or outside the `i64` range.
pub fn stochastic_round(x: f64, rng: &mut fastrand::Rng) -> Option<i64> {
    if !x.is_finite() {
        return None;
    }
    let floor = x.floor();
    if !(-I64_LIMIT..I64_LIMIT).contains(&floor) {
        return None;
    }
    // In range, so the cast is exact.
    let whole = floor as i64;
    let fraction = x - floor;
    if fraction > 0.0 && rng.f64() < fraction {
        whole.checked_add(1)
    } else {
        Some(whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_at_full_rate_are_exact() {
        let mut rng = fastrand::Rng::with_seed(1);
        for v in [0, 1, -1, i64::MAX, i64::MIN] {
            assert_eq!(scale_int(v, 1.0, &mut rng), Some(v));
        }
    }

    #[test]
    fn whole_results_are_exact_whatever_the_draw() {
        let mut rng = fastrand::Rng::with_seed(2);
        for _ in 0..1000 {
            assert_eq!(scale_int(1, 0.5, &mut rng), Some(2));
            assert_eq!(scale_int(-3, 0.25, &mut rng), Some(-12));
            assert_eq!(scale_float(2.0, 1.0, &mut rng), Some(2));
        }
    }

    #[test]
    fn results_are_one_of_the_two_neighbours() {
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..1000 {
            let d = scale_int(1, 0.3, &mut rng).unwrap();
            assert!(d == 3 || d == 4, "{d}");
            let n = scale_float(-1.5, 1.0, &mut rng).unwrap();
            assert!(n == -2 || n == -1, "{n}");
        }
    }

    /// The long-run mean of a sampled counter equals value / rate: the unbiasedness
    /// promise made in the book (docs/src/concepts/counting-modes.md).
    #[test]
    fn long_run_mean_is_unbiased() {
        let mut rng = fastrand::Rng::with_seed(4);
        let n = 200_000;
        for (value, rate) in [(1_i64, 0.3), (7, 0.9), (-2, 0.7), (1, 0.01)] {
            let total: i64 = (0..n)
                .map(|_| scale_int(value, rate, &mut rng).unwrap())
                .sum();
            let expected = value as f64 / rate * n as f64;
            // Each draw has variance <= 1/4, so the sum's standard deviation is at most
            // sqrt(n)/2 ≈ 224; allow 6 of them.
            assert!(
                (total as f64 - expected).abs() < 6.0 * (n as f64).sqrt() / 2.0,
                "value {value} rate {rate}: total {total}, expected {expected}"
            );
        }
        let total: i64 = (0..n)
            .map(|_| scale_float(0.25, 1.0, &mut rng).unwrap())
            .sum();
        assert!((total as f64 - 0.25 * n as f64).abs() < 6.0 * (n as f64).sqrt() / 2.0);
    }

    #[test]
    fn out_of_range_and_non_finite_are_refused() {
        let mut rng = fastrand::Rng::with_seed(5);
        assert_eq!(scale_int(i64::MAX, 0.5, &mut rng), None);
        assert_eq!(scale_int(i64::MIN, 0.5, &mut rng), None);
        assert_eq!(scale_float(f64::NAN, 1.0, &mut rng), None);
        assert_eq!(scale_float(f64::INFINITY, 1.0, &mut rng), None);
        assert_eq!(scale_float(1e300, 1.0, &mut rng), None);
        assert_eq!(stochastic_round(-I64_LIMIT, &mut rng), Some(i64::MIN));
    }
}
