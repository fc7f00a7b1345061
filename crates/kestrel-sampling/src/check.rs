//! The valid values of the sampler's parameters and of a generation's token
//! limit, held once so that every front end (the CLI's flags, the server's
//! JSON fields) refuses the same values with the same words. Each range is
//! a [`Bounds`] constant named after its field; [`SamplerParams::check`]
//! checks a whole parameter set against them.

use std::fmt;

use crate::SamplerParams;

/// A value outside its field's valid range; the text names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeError {
    /// The field, as the server's JSON names it (a CLI may name its flag).
    pub field: &'static str,
    message: String,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RangeError {}

/// The closed range `lo..=hi` a field's value must lie in; where
/// `above_lo` gives a reason, `lo` itself is refused too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds<T> {
    pub field: &'static str,
    pub lo: T,
    pub hi: T,
    /// Why the value must be above `lo` (the range is then open there).
    pub above_lo: Option<&'static str>,
}

impl<T: PartialOrd + fmt::Display + Copy> Bounds<T> {
    const fn closed(field: &'static str, lo: T, hi: T) -> Bounds<T> {
        Bounds {
            field,
            lo,
            hi,
            above_lo: None,
        }
    }

    /// `x` if it lies within the bounds. A NaN never does.
    pub fn check(&self, x: T) -> Result<T, RangeError> {
        if !(self.lo <= x && x <= self.hi) {
            return Err(self.outside(&x));
        }
        if let Some(why) = self.above_lo {
            if x <= self.lo {
                return Err(RangeError {
                    field: self.field,
                    message: format!("'{}' must be above {} ({why})", self.field, self.lo),
                });
            }
        }
        Ok(x)
    }

    /// The error for a value outside the bounds, shown as `got` (for a
    /// value that fits no `T`, such as a JSON integer past `i64`).
    pub fn outside(&self, got: &dyn fmt::Display) -> RangeError {
        RangeError {
            field: self.field,
            message: format!(
                "'{}' must be between {} and {}, got {got}",
                self.field, self.lo, self.hi
            ),
        }
    }
}

/// Softmax temperature (0 is greedy).
pub const TEMPERATURE: Bounds<f64> = Bounds::closed("temperature", 0.0, 100.0);
/// Top-k: any `i32`; 0 or less turns the filter off.
pub const TOP_K: Bounds<i64> = Bounds::closed("top_k", i32::MIN as i64, i32::MAX as i64);
pub const TOP_P: Bounds<f64> = Bounds::closed("top_p", 0.0, 1.0);
pub const MIN_P: Bounds<f64> = Bounds::closed("min_p", 0.0, 1.0);
/// Logits are divided by the repeat penalty, so it must be above 0.
pub const REPEAT_PENALTY: Bounds<f64> = Bounds {
    field: "repeat_penalty",
    lo: 0.0,
    hi: 100.0,
    above_lo: Some("1 leaves the logits as they are"),
};
/// -1 is the whole history, 0 turns the penalties off.
pub const REPEAT_LAST_N: Bounds<i64> = Bounds::closed("repeat_last_n", -1, i32::MAX as i64);
pub const FREQUENCY_PENALTY: Bounds<f64> = Bounds::closed("frequency_penalty", -2.0, 2.0);
pub const PRESENCE_PENALTY: Bounds<f64> = Bounds::closed("presence_penalty", -2.0, 2.0);
/// A generation's token limit (`n_predict`, `max_tokens`, ...); -1 is none.
pub const N_PREDICT: Bounds<i64> = Bounds::closed("n_predict", -1, u32::MAX as i64);

/// The largest logit bias, either way, short of a ban (`-inf`).
pub const LOGIT_BIAS_MAX: f64 = 1e6;

/// A finite logit bias within [`LOGIT_BIAS_MAX`] either way.
pub fn check_logit_bias(bias: f64) -> Result<f64, RangeError> {
    if bias.is_finite() && bias.abs() <= LOGIT_BIAS_MAX {
        Ok(bias)
    } else {
        Err(RangeError {
            field: "logit_bias",
            message: "logit_bias: bias out of range".to_owned(),
        })
    }
}

impl SamplerParams {
    /// Checks every field against its range (a logit bias of `-inf`, a ban,
    /// is valid); the first one outside names itself.
    pub fn check(&self) -> Result<(), RangeError> {
        TEMPERATURE.check(f64::from(self.temperature))?;
        TOP_K.check(i64::from(self.top_k))?;
        TOP_P.check(f64::from(self.top_p))?;
        MIN_P.check(f64::from(self.min_p))?;
        REPEAT_PENALTY.check(f64::from(self.repeat_penalty))?;
        REPEAT_LAST_N.check(i64::from(self.repeat_last_n))?;
        FREQUENCY_PENALTY.check(f64::from(self.frequency_penalty))?;
        PRESENCE_PENALTY.check(f64::from(self.presence_penalty))?;
        for &(_, bias) in &self.logit_bias {
            if bias != f32::NEG_INFINITY {
                check_logit_bias(f64::from(bias))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_greedy_are_valid() {
        assert_eq!(SamplerParams::default().check(), Ok(()));
        assert_eq!(SamplerParams::greedy().check(), Ok(()));
    }

    #[test]
    fn each_field_out_of_range_names_itself() {
        let d = SamplerParams::default();
        let cases = [
            (
                SamplerParams {
                    temperature: 101.0,
                    ..d.clone()
                },
                "'temperature' must be between 0 and 100, got 101",
            ),
            (
                SamplerParams {
                    top_p: f32::NAN,
                    ..d.clone()
                },
                "'top_p' must be between 0 and 1, got NaN",
            ),
            (
                SamplerParams {
                    min_p: -0.5,
                    ..d.clone()
                },
                "'min_p' must be between 0 and 1, got -0.5",
            ),
            (
                SamplerParams {
                    repeat_penalty: 0.0,
                    ..d.clone()
                },
                "'repeat_penalty' must be above 0 (1 leaves the logits as they are)",
            ),
            (
                SamplerParams {
                    repeat_penalty: -1.0,
                    ..d.clone()
                },
                "'repeat_penalty' must be between 0 and 100, got -1",
            ),
            (
                SamplerParams {
                    repeat_last_n: -2,
                    ..d.clone()
                },
                "'repeat_last_n' must be between -1 and 2147483647, got -2",
            ),
            (
                SamplerParams {
                    frequency_penalty: 2.5,
                    ..d.clone()
                },
                "'frequency_penalty' must be between -2 and 2, got 2.5",
            ),
            (
                SamplerParams {
                    presence_penalty: f32::INFINITY,
                    ..d.clone()
                },
                "'presence_penalty' must be between -2 and 2, got inf",
            ),
            (
                SamplerParams {
                    logit_bias: vec![(1, 2e6)],
                    ..d.clone()
                },
                "logit_bias: bias out of range",
            ),
        ];
        for (p, want) in cases {
            assert_eq!(p.check().unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn the_edges_and_a_ban_are_valid() {
        let p = SamplerParams {
            temperature: 0.0,
            top_k: i32::MIN,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1e-30,
            repeat_last_n: -1,
            frequency_penalty: -2.0,
            presence_penalty: 2.0,
            logit_bias: vec![(3, f32::NEG_INFINITY), (4, 1e6)],
            ..SamplerParams::default()
        };
        assert_eq!(p.check(), Ok(()));
        assert_eq!(N_PREDICT.check(-1), Ok(-1));
        assert_eq!(
            N_PREDICT.check(-2).unwrap_err().to_string(),
            "'n_predict' must be between -1 and 4294967295, got -2"
        );
        assert_eq!(TOP_K.outside(&"1e300").field, "top_k");
    }
}
