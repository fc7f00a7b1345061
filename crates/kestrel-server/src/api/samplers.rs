//! llama-server's sampling fields beyond Kestrel's chain (mirostat, typical
//! p, XTC, DRY, ... and `samplers`, the chain's order): accepted at the
//! values that turn them off, refused otherwise.

use kestrel_sampling::SamplerParams;
use serde_json::Value;

use super::fields::{field, get_bool, get_f32, get_int, wrong, Obj};
use crate::error::ApiError;

/// A llama.cpp sampler, as `samplers` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    TypicalP,
    TopP,
    MinP,
    Xtc,
    Temperature,
    Infill,
    AdaptiveP,
}

impl Stage {
    /// llama.cpp's names (any case, `-` for `_` or neither, and its aliases)
    /// and letters.
    fn named(name: &str) -> Option<Stage> {
        let key: String = name
            .to_ascii_lowercase()
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect();
        Some(match key.as_str() {
            "penalties" => Stage::Penalties,
            "dry" => Stage::Dry,
            "topnsigma" => Stage::TopNSigma,
            "topk" => Stage::TopK,
            "typp" | "typ" => Stage::TypicalP,
            "topp" | "nucleus" => Stage::TopP,
            "minp" => Stage::MinP,
            "xtc" => Stage::Xtc,
            "temperature" | "temp" => Stage::Temperature,
            "infill" => Stage::Infill,
            "adaptivep" => Stage::AdaptiveP,
            _ => return None,
        })
    }

    fn lettered(c: char) -> Option<Stage> {
        Some(match c {
            'e' => Stage::Penalties,
            'd' => Stage::Dry,
            's' => Stage::TopNSigma,
            'k' => Stage::TopK,
            'y' => Stage::TypicalP,
            'p' => Stage::TopP,
            'm' => Stage::MinP,
            'x' => Stage::Xtc,
            't' => Stage::Temperature,
            'i' => Stage::Infill,
            'a' => Stage::AdaptiveP,
            _ => return None,
        })
    }
}

/// The stages Kestrel's chain runs, in its (llama.cpp's default) order.
const CHAIN: [Stage; 5] = [
    Stage::Penalties,
    Stage::TopK,
    Stage::TopP,
    Stage::MinP,
    Stage::Temperature,
];

/// llama-server's sampling fields beyond Kestrel's chain. Each is accepted
/// at the value that turns its sampler off (clients such as chat front
/// ends send the whole set with those values) and is a 400 otherwise,
/// never silently ignored. `samplers` (llama-server's order of the chain,
/// names or letters) may leave stages out, which turns them off here as
/// there, but may not reorder Kestrel's five.
pub(crate) fn llama_sampling(o: &Obj, s: &mut SamplerParams) -> Result<(), ApiError> {
    let any = |name| get_f32(o, name, f32::MIN, f32::MAX);
    let refuse = |what: &str| {
        Err(ApiError::bad_request(format!(
            "{what} is not supported yet"
        )))
    };
    if get_int(o, "mirostat", 0, 2)?.is_some_and(|m| m != 0) {
        return refuse("'mirostat' sampling (0 turns it off)");
    }
    if any("typical_p")?.is_some_and(|p| p < 1.0) {
        return refuse("'typical_p' below 1 (locally typical sampling)");
    }
    if any("top_n_sigma")?.is_some_and(|n| n > 0.0) {
        return refuse("'top_n_sigma' above 0");
    }
    let xtc_threshold = get_f32(o, "xtc_threshold", 0.0, 1.0)?.unwrap_or(0.1);
    if get_f32(o, "xtc_probability", 0.0, 1.0)?.is_some_and(|p| p > 0.0) && xtc_threshold <= 0.5 {
        return refuse("XTC sampling ('xtc_probability' above 0)");
    }
    if any("dynatemp_range")?.is_some_and(|r| r > 0.0) {
        return refuse("dynamic temperature ('dynatemp_range' above 0)");
    }
    if any("dry_multiplier")?.is_some_and(|m| m != 0.0) {
        return refuse("DRY sampling ('dry_multiplier' other than 0)");
    }
    if any("adaptive_target")?.is_some_and(|t| t >= 0.0) {
        return refuse("adaptive-p sampling ('adaptive_target' of 0 or more)");
    }
    if get_int(o, "min_keep", 0, i64::from(i32::MAX))?.is_some_and(|k| k > 1) {
        return refuse("'min_keep' above 1");
    }
    if get_bool(o, "post_sampling_probs")? == Some(true) {
        return refuse("'post_sampling_probs'");
    }
    let Some(v) = field(o, "samplers") else {
        return Ok(());
    };
    let stages: Vec<Stage> = match v {
        Value::Array(names) => names
            .iter()
            .map(|n| {
                n.as_str().and_then(Stage::named).ok_or_else(|| {
                    ApiError::bad_request(format!("'samplers': unknown sampler {n}"))
                })
            })
            .collect::<Result<_, _>>()?,
        Value::String(letters) => letters
            .chars()
            .map(|c| {
                Stage::lettered(c).ok_or_else(|| {
                    ApiError::bad_request(format!("'samplers': unknown sampler letter {c:?}"))
                })
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(wrong(
                "samplers",
                "an array of names or a string of letters",
                other,
            ))
        }
    };
    if let Some(st) = stages
        .iter()
        .find(|st| matches!(st, Stage::Infill | Stage::AdaptiveP))
    {
        return refuse(&format!("the {st:?} sampler"));
    }
    // The other stages beyond the chain are off (checked above) wherever
    // they stand; Kestrel's five must keep its order.
    let ours: Vec<usize> = stages
        .iter()
        .filter_map(|st| CHAIN.iter().position(|c| c == st))
        .collect();
    if ours.windows(2).any(|w| w[0] >= w[1]) {
        return refuse(
            "'samplers' in another order than penalties, top_k, top_p, min_p, temperature",
        );
    }
    for (i, stage) in CHAIN.iter().enumerate() {
        if ours.contains(&i) {
            continue;
        }
        match stage {
            Stage::Penalties => {
                s.repeat_penalty = 1.0;
                s.frequency_penalty = 0.0;
                s.presence_penalty = 0.0;
            }
            Stage::TopK => s.top_k = 0,
            Stage::TopP => s.top_p = 1.0,
            Stage::MinP => s.min_p = 0.0,
            // Without its temperature stage llama.cpp draws from the
            // filtered logits as they are.
            _ => s.temperature = 1.0,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn llama_samplers_off_are_accepted_on_are_refused() {
        let d = SamplerParams::default();
        let run = |v: Value| {
            let mut s = d.clone();
            llama_sampling(&obj(v), &mut s).map(|_| s)
        };
        // llama-server's defaults, as front ends send them.
        let off = json!({"mirostat": 0, "typical_p": 1.0, "top_n_sigma": -1.0,
            "xtc_probability": 0.0, "xtc_threshold": 0.1, "dynatemp_range": 0.0,
            "dry_multiplier": 0.0, "adaptive_target": -1.0, "min_keep": 0,
            "post_sampling_probs": false,
            "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p",
                "min_p", "xtc", "temperature"]});
        let s = run(off).unwrap();
        assert_eq!((s.top_k, s.top_p, s.min_p), (d.top_k, d.top_p, d.min_p));
        assert_eq!(s.temperature, d.temperature);
        assert_eq!(
            run(json!({"samplers": "edskypmxt"})).unwrap().top_k,
            d.top_k
        );
        // XTC above its threshold of 0.5 does nothing.
        assert!(run(json!({"xtc_probability": 0.5, "xtc_threshold": 0.9})).is_ok());
        for (on, want) in [
            (json!({"mirostat": 2}), "mirostat"),
            (json!({"typical_p": 0.9}), "typical_p"),
            (json!({"top_n_sigma": 1.5}), "top_n_sigma"),
            (json!({"xtc_probability": 0.5}), "XTC"),
            (json!({"dynatemp_range": 0.5}), "dynatemp_range"),
            (json!({"dry_multiplier": 0.8}), "dry_multiplier"),
            (json!({"adaptive_target": 0.3}), "adaptive_target"),
            (json!({"min_keep": 5}), "min_keep"),
            (json!({"post_sampling_probs": true}), "post_sampling_probs"),
            (json!({"samplers": ["temperature", "top_k"]}), "order"),
            (json!({"samplers": "tk"}), "order"),
            (json!({"samplers": ["top_k", "bogus"]}), "bogus"),
            (json!({"samplers": "kq"}), "'q'"),
            (json!({"samplers": ["infill"]}), "Infill"),
            (json!({"samplers": 3}), "samplers"),
        ] {
            let e = run(on.clone()).unwrap_err();
            assert!(e.message.contains(want), "{on}: {}", e.message);
        }
        // Stages left out are off, as in llama.cpp's chain.
        let mut pen = d.clone();
        pen.repeat_penalty = 1.3;
        pen.presence_penalty = 0.5;
        let o = obj(json!({"samplers": ["Top-K", "temp"]}));
        llama_sampling(&o, &mut pen).unwrap();
        assert_eq!((pen.repeat_penalty, pen.presence_penalty), (1.0, 0.0));
        assert_eq!((pen.top_k, pen.top_p, pen.min_p), (d.top_k, 1.0, 0.0));
        assert_eq!(pen.temperature, d.temperature);
        let s = run(json!({"samplers": ["top_k", "min_p"]})).unwrap();
        assert_eq!((s.temperature, s.min_p, s.top_p), (1.0, d.min_p, 1.0));
    }
}
