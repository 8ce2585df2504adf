//! Property tests of the batch line parser: any bytes, any JSON — never a panic, and every
//! refusal is one of the documented messages.

use dsh_bash::batch_line::{parse_bytes, parse_line};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const CASES: u32 = 2048;

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![Just("bash"), Just("job_list"), Just("tool"), Just("session"), Just("cwd"), Just("id")]
            .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("tool".to_owned()),
                        Just("args".to_owned()),
                        Just("session".to_owned()),
                        Just("cwd".to_owned()),
                        Just("id".to_owned()),
                        "[a-z]{1,6}"
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn known_refusal(message: &str) -> bool {
    message.starts_with("invalid JSON: ")
        || message == "invalid request: expected a JSON object"
        || message == "invalid request: \"cwd\" requires \"session\""
        || message.starts_with("invalid request: ")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = parse_bytes(&bytes) {
            prop_assert!(known_refusal(&e.message), "{}", e.message);
        }
    }

    #[test]
    fn arbitrary_json_parses_or_is_refused_with_its_id(value in arb_json()) {
        let line = value.to_string();
        // Compare against the value as JSON text reads back (float text is not bit-exact).
        let value: Value = serde_json::from_str(&line).expect("serde_json reads its own output");
        match parse_line(&line) {
            Ok(request) => {
                prop_assert!(value.is_object());
                prop_assert_eq!(Some(&Value::String(request.tool.clone())), value.get("tool"));
                prop_assert_eq!(&request.id, value.get("id").unwrap_or(&Value::Null));
            }
            Err(e) => {
                prop_assert!(known_refusal(&e.message), "{}", e.message);
                if value.is_object() {
                    prop_assert_eq!(&e.id, value.get("id").unwrap_or(&Value::Null));
                }
            }
        }
    }
}

/// The JSON property is only as strong as its generator: over `CASES` generated values (a
/// fixed seed, so the counts are stable), both branches it checks must be taken: a parsed
/// request (about 1.5% of values) and a refusal.
#[test]
fn the_json_generator_reaches_both_outcomes() {
    use proptest::strategy::ValueTree;

    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = arb_json();
    let (mut parsed, mut refused) = (0u32, 0u32);
    for _ in 0..CASES {
        let value = strategy.new_tree(&mut runner).expect("a generated value").current();
        match parse_line(&value.to_string()) {
            Ok(_) => parsed += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        parsed >= 8 && refused >= CASES / 2,
        "of {CASES} values {parsed} parsed and {refused} were refused"
    );
}
