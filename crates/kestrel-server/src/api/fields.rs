//! Reading a request body's JSON field by field, so that a wrong type or an
//! out-of-range value gets a 400 that names the field. The ranges of the
//! sampler's parameters come from kestrel-sampling's `check`, which the CLI
//! shares.

use kestrel_sampling::check::Bounds;
use serde_json::{Map, Value};

use crate::error::ApiError;

pub(crate) type Obj = Map<String, Value>;

/// A request body as JSON, or a 400 naming the parse error.
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))
}

/// Parses a body that must be a JSON object.
pub(crate) fn parse_object(body: &[u8]) -> Result<Obj, ApiError> {
    match parse_json(body)? {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(format!(
            "the body must be a JSON object, got {}",
            kind(&other)
        ))),
    }
}

/// A JSON value's kind, for error messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn wrong(name: &str, want: &str, got: &Value) -> ApiError {
    ApiError::bad_request(format!("'{name}' must be {want}, got {}", kind(got)))
}

/// A string field of a nested object (`at` names that object in errors).
pub(crate) fn str_at<'a>(o: &'a Obj, at: &str, name: &str) -> Result<Option<&'a str>, ApiError> {
    match field(o, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(wrong(&format!("{at}.{name}"), "a string", v)),
    }
}

/// A string field a nested object must have.
pub(crate) fn required_str_at<'a>(o: &'a Obj, at: &str, name: &str) -> Result<&'a str, ApiError> {
    str_at(o, at, name)?.ok_or_else(|| ApiError::bad_request(format!("{at} has no '{name}'")))
}

/// A present, non-null field.
pub(crate) fn field<'a>(o: &'a Obj, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

pub(crate) fn get_bool(o: &Obj, name: &str) -> Result<Option<bool>, ApiError> {
    field(o, name)
        .map(|v| v.as_bool().ok_or_else(|| wrong(name, "a boolean", v)))
        .transpose()
}

pub(crate) fn get_str<'a>(o: &'a Obj, name: &str) -> Result<Option<&'a str>, ApiError> {
    field(o, name)
        .map(|v| v.as_str().ok_or_else(|| wrong(name, "a string", v)))
        .transpose()
}

/// A number within `lo..=hi`.
pub(crate) fn get_f32(o: &Obj, name: &str, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
    let Some(v) = field(o, name) else {
        return Ok(None);
    };
    let x = v.as_f64().ok_or_else(|| wrong(name, "a number", v))?;
    if !(f64::from(lo)..=f64::from(hi)).contains(&x) {
        return Err(ApiError::bad_request(format!(
            "'{name}' must be between {lo} and {hi}, got {x}"
        )));
    }
    Ok(Some(x as f32))
}

/// A number within a sampler parameter's `bounds` (kestrel-sampling's
/// [`check`] holds them, for the CLI too).
pub(crate) fn get_f32_in(o: &Obj, bounds: Bounds<f64>) -> Result<Option<f32>, ApiError> {
    let name = bounds.field;
    let Some(v) = field(o, name) else {
        return Ok(None);
    };
    let x = v.as_f64().ok_or_else(|| wrong(name, "a number", v))?;
    let x = bounds.check(x).map_err(range_error)?;
    Ok(Some(x as f32))
}

pub(crate) fn range_error(e: kestrel_sampling::RangeError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

/// An integer within `lo..=hi`.
pub(crate) fn get_int(
    o: &Obj,
    name: &'static str,
    lo: i64,
    hi: i64,
) -> Result<Option<i64>, ApiError> {
    get_int_in(
        o,
        Bounds {
            field: name,
            lo,
            hi,
            above_lo: None,
        },
    )
}

/// An integer within `bounds`, the field they name.
pub(crate) fn get_int_in(o: &Obj, bounds: Bounds<i64>) -> Result<Option<i64>, ApiError> {
    let name = bounds.field;
    let Some(v) = field(o, name) else {
        return Ok(None);
    };
    let x = match v.as_i64() {
        Some(x) => x,
        // 3.0 is an integer to most JSON writers; 3.5 is not.
        None => match v.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => f as i64,
            // A whole number past i64 (an u64, 1e300) is out of range, not
            // of the wrong type.
            Some(f) if f.fract() == 0.0 => return Err(range_error(bounds.outside(v))),
            _ => return Err(wrong(name, "an integer", v)),
        },
    };
    bounds.check(x).map(Some).map_err(range_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn body_must_be_a_json_object() {
        assert!(parse_object(b"{\"a\":1}").is_ok());
        for bad in [&b""[..], b"{", b"[1]", b"\"x\"", b"null", b"\xff\xfe"] {
            let e = parse_object(bad).unwrap_err();
            assert_eq!(e.status.as_u16(), 400);
        }
    }

    #[test]
    fn integers_and_ranges_name_the_field() {
        let o = obj(json!({"a": 3, "b": 3.0, "c": 3.5, "d": "3", "e": 99}));
        assert_eq!(get_int(&o, "a", 0, 10).unwrap(), Some(3));
        assert_eq!(get_int(&o, "b", 0, 10).unwrap(), Some(3));
        assert_eq!(get_int(&o, "missing", 0, 10).unwrap(), None);
        assert!(get_int(&o, "c", 0, 10).unwrap_err().message.contains("'c'"));
        assert!(get_int(&o, "d", 0, 10)
            .unwrap_err()
            .message
            .contains("got a string"));
        assert!(get_int(&o, "e", 0, 10)
            .unwrap_err()
            .message
            .contains("between 0 and 10"));
        let o = obj(json!({"t": 1e300, "u": null}));
        assert!(get_f32(&o, "t", 0.0, 100.0).is_err());
        assert_eq!(get_f32(&o, "u", 0.0, 1.0).unwrap(), None);
    }

    #[test]
    fn whole_numbers_past_i64_are_out_of_range_not_the_wrong_type() {
        let o = obj(json!({"n": 18446744073709551615u64, "m": 1e300, "f": -1e19}));
        for name in ["n", "m", "f"] {
            let e = get_int(&o, name, -1, 10).unwrap_err();
            assert!(
                e.message
                    .contains(&format!("'{name}' must be between -1 and 10")),
                "{}",
                e.message
            );
        }
    }
}
