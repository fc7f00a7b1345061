//! Statistics of repeated timings, computed as llama-bench computes them:
//! tokens/s per repetition, then the mean and sample standard deviation of those.

/// Arithmetic mean; 0 for no samples.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Sample standard deviation (divides by n - 1); 0 for fewer than two samples,
/// as llama-bench reports it. Two passes, so large equal values give exactly 0.
pub fn sample_stddev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    let ss: f64 = xs.iter().map(|x| (x - m) * (x - m)).sum();
    (ss / (xs.len() - 1) as f64).sqrt()
}

/// Tokens per second of one repetition that processed `tokens` in `ns` nanoseconds.
pub fn tokens_per_second(tokens: usize, ns: u64) -> f64 {
    if ns == 0 {
        // A zero-length interval cannot happen with a monotonic nanosecond
        // clock and at least one forward pass; report 0 rather than infinity.
        return 0.0;
    }
    tokens as f64 * 1e9 / ns as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_of_values() {
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(mean(&[4.0]), 4.0);
        assert_eq!(mean(&[1.0, 2.0, 3.0, 6.0]), 3.0);
    }

    #[test]
    fn stddev_uses_n_minus_one() {
        // Deviations from the mean 5: -3, -1, -1, -1, 0, 0, 2, 4 -> squares sum to 32.
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        let want = (32.0f64 / 7.0).sqrt();
        assert!((sample_stddev(&xs) - want).abs() < 1e-12);
        // The population formula would give exactly 2; make sure we are not using it.
        assert!((sample_stddev(&xs) - 2.0).abs() > 0.1);
        assert!((sample_stddev(&[1.0, 3.0]) - 2f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn stddev_of_one_or_no_sample_is_zero() {
        assert_eq!(sample_stddev(&[]), 0.0);
        assert_eq!(sample_stddev(&[123.4]), 0.0);
    }

    #[test]
    fn stddev_of_equal_large_values_is_exactly_zero() {
        assert_eq!(sample_stddev(&[1e12, 1e12, 1e12]), 0.0);
    }

    #[test]
    fn rate() {
        assert_eq!(tokens_per_second(512, 2_000_000_000), 256.0);
        assert_eq!(tokens_per_second(1, 1_000), 1e6);
        assert_eq!(tokens_per_second(5, 0), 0.0);
    }
}
