//! JSON the way a JavaScript peer writes it: integral numbers without a decimal point.

use serde::Serializer;
use serde_json::{Number, Value};

/// The largest integer a JSON number carries exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// `n` as a JSON value: an integer when integral and exactly representable, else a float.
/// Non-finite values become `null`, as `JSON.stringify` does.
pub fn js_number(n: f64) -> Value {
    if n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER {
        Value::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n).map(Value::Number).unwrap_or(Value::Null)
    }
}

/// `n` in its shortest JS text form (`100`, not `100.0`; `0.5`; `1e+21`; `0.000001`), as
/// ECMAScript's `Number::toString` writes it: the shortest digits that read back as `n`, and
/// of two such equally close to `n`, the even one (`ryu-js`; the standard library's shortest
/// form rounds such a tie up).
pub fn js_number_text(n: f64) -> String {
    if n.is_nan() {
        return "NaN".to_owned();
    }
    if n.is_infinite() {
        return if n > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if n == 0.0 {
        return "0".to_owned();
    }
    ryu_js::Buffer::new().format_finite(n).to_owned()
}

/// A JSON value's text as `JSON.stringify(JSON.parse(text))` would print it: numbers in JS
/// form, and an integer beyond 2^53 as the double JavaScript parses it to
/// (`-9007199254740993` prints `-9007199254740992`).
pub fn js_json_text(value: &Value) -> String {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() => js_number_text(f),
            Some(f) if f.abs() > MAX_SAFE_INTEGER => js_number_text(f),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// serde `serialize_with` for `f64` fields that must look like JS numbers.
pub fn serialize_js_f64<S: Serializer>(n: &f64, s: S) -> Result<S::Ok, S::Error> {
    match js_number(*n) {
        Value::Number(num) => {
            if let Some(i) = num.as_i64() {
                s.serialize_i64(i)
            } else {
                s.serialize_f64(*n)
            }
        }
        _ => s.serialize_none(),
    }
}

/// Rewrites every integral float inside `value` as an integer, so values built from `f64`
/// fields serialize like JS.
pub fn normalize_numbers(value: &mut Value) {
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64() {
                *value = js_number(f);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

/// Whether `s` is empty after JavaScript's `String.prototype.trim()`: every char is Unicode
/// White_Space except NEL (U+0085, which `trim()` keeps), or the byte order mark (U+FEFF).
pub fn js_is_blank(s: &str) -> bool {
    s.chars().all(|c| (c.is_whitespace() && c != '\u{85}') || c == '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integral_floats_print_as_integers() {
        assert_eq!(js_number(100.0).to_string(), "100");
        assert_eq!(js_number_text(100.0), "100");
        assert_eq!(js_number_text(0.5), "0.5");
        assert_eq!(js_number_text(-1.0), "-1");
        assert_eq!(js_number_text(-0.0), "0");
        assert_eq!(js_number_text(f64::NAN), "NaN");
        assert_eq!(js_number_text(f64::NEG_INFINITY), "-Infinity");
        let mut v = json!({"a": 10000.0, "b": [1.5, 2.0]});
        normalize_numbers(&mut v);
        assert_eq!(v.to_string(), r#"{"a":10000,"b":[1.5,2]}"#);
    }

    #[test]
    fn number_texts_follow_ecmascript_number_to_string() {
        let cases = [
            (9_007_199_254_740_992.0, "9007199254740992"),
            (1e16, "10000000000000000"),
            (123_456_789_012_345_680_000.0, "123456789012345680000"),
            (1e21, "1e+21"),
            (-1.5e300, "-1.5e+300"),
            (0.000001, "0.000001"),
            (-0.0000015, "-0.0000015"),
            (1e-7, "1e-7"),
            (2.5, "2.5"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            // Exact ties between two shortest forms go to the even digit, as in JavaScript.
            (-1_240_794_154_815_960.2, "-1240794154815960.2"),
            (-87_060_156_657_960.12, "-87060156657960.12"),
        ];
        for (n, text) in cases {
            assert_eq!(js_number_text(n), text, "{n:e}");
        }
    }

    #[test]
    fn json_texts_are_those_of_the_number_javascript_parses() {
        let text = |t: &str| js_json_text(&serde_json::from_str(t).expect(t));
        assert_eq!(text("-904201.7709435733"), "-904201.7709435733");
        assert_eq!(text("-9007199254740993"), "-9007199254740992");
        assert_eq!(text("18446744073709551615"), "18446744073709552000");
        assert_eq!(text("9007199254740991"), "9007199254740991");
        assert_eq!(text("1.0"), "1");
    }

    #[test]
    fn blank_follows_javascript_trim() {
        assert!(js_is_blank(""));
        assert!(js_is_blank(" \t\n\r\u{a0}\u{2028}\u{3000}\u{feff}"));
        assert!(!js_is_blank("\u{85}"), "trim() keeps NEL");
        assert!(!js_is_blank(" x "));
    }
}
