//! Arbitrary JSON arguments for the tool property tests, and the JavaScript texts error
//! messages quote values in. Shared by the bash tool's and the job tools' robustness tests.

use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};

/// Every character JavaScript's `String.prototype.trim()` removes.
pub const JS_WHITESPACE: &[char] = &[
    '\u{9}', '\u{A}', '\u{B}', '\u{C}', '\u{D}', ' ', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2001}',
    '\u{2002}', '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}',
    '\u{200A}', '\u{2028}', '\u{2029}', '\u{202F}', '\u{205F}', '\u{3000}', '\u{FEFF}',
];

/// Characters that look blank but that `trim()` keeps (NEL, Mongolian vowel separator,
/// zero-width space).
pub const NOT_JS_WHITESPACE: &[char] = &['\u{85}', '\u{180E}', '\u{200B}'];

/// Blank as JavaScript's `trim()` sees it.
pub fn js_blank(s: &str) -> bool {
    s.chars().all(|c| JS_WHITESPACE.contains(&c))
}

/// `Number.prototype.toString()` of a finite double (ECMA-262 Number::toString, radix 10).
pub fn js_number_text(n: f64) -> String {
    if n == 0.0 {
        return "0".to_owned();
    }
    if n < 0.0 {
        return format!("-{}", js_number_text(-n));
    }
    // Rust's `{:e}` prints the shortest round-tripping digits: `d[.ddd]e<exp>`.
    let sci = format!("{n:e}");
    let (mantissa, exponent) = sci.split_once('e').expect("scientific notation has an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let point = exponent.parse::<i32>().expect("integral exponent") + 1;
    if k <= point && point <= 21 {
        format!("{digits}{}", "0".repeat((point - k) as usize))
    } else if 0 < point && point <= 21 {
        format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
    } else if -6 < point && point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else {
        let e = point - 1;
        let sign = if e >= 0 { '+' } else { '-' };
        let mantissa = if k == 1 { digits } else { format!("{}.{}", &digits[..1], &digits[1..]) };
        format!("{mantissa}e{sign}{}", e.abs())
    }
}

/// A JSON value's text as error messages quote it: numbers in their JavaScript form (an
/// integer beyond 2^53 as the double JavaScript parses it to), everything else as JSON.
pub fn js_json_text(value: &Value) -> String {
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => js_number_text(n.as_f64().expect("finite")),
        Value::Number(n) if n.as_f64().is_some_and(|f| f.abs() > 9_007_199_254_740_991.0) => {
            js_number_text(n.as_f64().expect("finite"))
        }
        other => other.to_string(),
    }
}

fn blank_string() -> BoxedStrategy<String> {
    prop::collection::vec(prop::sample::select(JS_WHITESPACE), 1..4)
        .prop_map(|chars| chars.into_iter().collect())
        .boxed()
}

/// Empty, blank, look-alike blank, plain, arbitrary unicode and long strings.
pub fn arb_string() -> BoxedStrategy<String> {
    prop_oneof![
        2 => Just(String::new()),
        3 => blank_string(),
        2 => (blank_string(), prop::sample::select(NOT_JS_WHITESPACE))
            .prop_map(|(pad, c)| format!("{pad}{c}{pad}")),
        4 => "[a-z][a-z ./-]{0,15}",
        3 => any::<String>(),
        2 => "\\PC{0,40}",
        1 => "[a-z€]{1,8}".prop_map(|s| s.repeat(1500)),
    ]
    .boxed()
}

/// Integers of every width, arbitrary finite doubles and the usual troublemakers.
pub fn arb_number() -> BoxedStrategy<Value> {
    let special = [
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.0,
        -1.0,
        1e-7,
        -1e-7,
        0.000001,
        -0.000005,
        1e16,
        -2e17,
        1e21,
        -1e21,
        1e300,
        -1e300,
        9_007_199_254_740_993.0,
        -9_007_199_254_740_993.0,
        2_147_483_648.0,
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        f64::MAX,
        f64::MIN,
    ];
    prop_oneof![
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        2 => (-1000i64..1000).prop_map(Value::from),
        2 => any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        4 => prop::sample::select(special.to_vec()).prop_map(|f| json!(f)),
    ]
    .boxed()
}

/// Object keys: the real parameter names of every tool, look-alikes and random names.
pub fn arb_key() -> BoxedStrategy<String> {
    let known = [
        "command",
        "description",
        "timeoutMs",
        "workdir",
        "run_in_background",
        "sandbox_permissions",
        "justification",
        "job_id",
        "wait",
        "timeout_ms",
        "reason",
        "tail_lines",
        "env",
        "stdin",
        "stdoutMaxBytes",
        "Command",
        "",
        "__proto__",
    ];
    prop_oneof![prop::sample::select(known.to_vec()).prop_map(str::to_owned), arb_string()].boxed()
}

/// Any JSON value: scalars of every type and nested arrays and objects.
pub fn arb_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        arb_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..5)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
    .boxed()
}

/// A value for a parameter: mostly `plausible`, sometimes anything at all.
pub fn field(plausible: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![3 => plausible, 1 => arb_json()].boxed()
}

/// Arguments: usually an object holding each named field (present with its probability) plus
/// up to three random keys; sometimes any JSON value at all (arrays, strings, null…).
pub fn arb_args(fields: Vec<(&'static str, f64, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let present: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .into_iter()
        .map(|(name, probability, strategy)| {
            let pair = strategy.prop_map(move |v| (name.to_owned(), v));
            if probability >= 1.0 {
                pair.prop_map(Some).boxed()
            } else {
                prop::option::weighted(probability, pair).boxed()
            }
        })
        .collect();
    let object =
        (present, prop::collection::vec((arb_key(), arb_json()), 0..3)).prop_map(|(named, extra)| {
            let mut map = Map::new();
            for (key, value) in named.into_iter().flatten().chain(extra) {
                map.entry(key).or_insert(value);
            }
            Value::Object(map)
        });
    prop_oneof![9 => object, 1 => arb_json()].boxed()
}

#[cfg(test)]
#[test]
fn js_number_text_matches_javascript() {
    let cases = [
        (0.0, "0"),
        (-0.0, "0"),
        (100.0, "100"),
        (0.5, "0.5"),
        (-1.5, "-1.5"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (123456789012345680000.0, "123456789012345680000"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (9_007_199_254_740_992.0, "9007199254740992"),
        (f64::MAX, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
    ];
    for (n, text) in cases {
        assert_eq!(js_number_text(n), text, "{n:e}");
    }
}
