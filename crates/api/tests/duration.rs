//! The duration grammar of docs/design/api-contract.md §1.3.

use kopiur_api::Duration;
use proptest::prelude::*;

#[test]
fn accepts_bare_seconds_and_unit_groups() {
    for (text, secs) in [
        ("300", 300),
        ("0", 0),
        ("45s", 45),
        ("10m", 600),
        ("720h", 2_592_000),
        ("1h30m", 5400),
        ("1h1m1s", 3661),
        ("90m", 5400),
    ] {
        let d = Duration::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(d.as_secs(), secs, "{text}");
        assert_eq!(d.to_string(), text, "Display keeps the user's text");
    }
}

#[test]
fn rejects_days_fractions_signs_ms_and_iso() {
    for text in
        ["1d", "1.5h", "-5m", "+5m", "500ms", "PT5M", "", "h", "5x", "1h30", " 5m", "5m ", "999999999999999999h"]
    {
        assert!(Duration::parse(text).is_err(), "{text:?} must be rejected");
    }
}

#[test]
fn error_message_names_the_input_and_the_fix() {
    let msg = Duration::parse("1d").unwrap_err().to_string();
    assert!(msg.contains("\"1d\"") && msg.contains("720h"), "{msg}");
}

#[test]
fn deserializing_rejects_what_parse_rejects() {
    assert!(serde_json::from_str::<Duration>("\"1d\"").is_err());
    let d: Duration = serde_json::from_str("\"1h30m\"").unwrap();
    assert_eq!(serde_json::to_string(&d).unwrap(), "\"1h30m\"");
}

#[test]
fn from_secs_is_canonical() {
    assert_eq!(Duration::from_secs(5400).to_string(), "1h30m");
    assert_eq!(Duration::from_secs(0).to_string(), "0s");
    assert_eq!(Duration::from_secs(1800).to_string(), "30m");
}

fn group() -> impl Strategy<Value = (u64, char)> {
    (0u64..10_000, prop_oneof![Just('h'), Just('m'), Just('s')])
}

proptest! {
    #[test]
    fn compound_forms_sum_their_groups(groups in prop::collection::vec(group(), 1..4)) {
        let text: String = groups.iter().map(|(n, u)| format!("{n}{u}")).collect();
        prop_assume!(text.len() <= Duration::MAX_LEN);
        let expected: u64 = groups.iter().map(|(n, u)| n * match u { 'h' => 3600, 'm' => 60, _s => 1 }).sum();
        prop_assert_eq!(Duration::parse(&text).unwrap().as_secs(), expected);
    }

    #[test]
    fn canonical_text_reparses_to_the_same_value(secs in 0u64..10_000_000) {
        let d = Duration::from_secs(secs);
        prop_assert_eq!(Duration::parse(d.as_str()).unwrap().as_secs(), secs);
    }

    #[test]
    fn negatives_are_always_rejected(n in 1u64..100_000, unit in prop_oneof![Just(""), Just("s"), Just("m"), Just("h")]) {
        let text = format!("-{n}{unit}");
        prop_assert!(Duration::parse(&text).is_err());
    }

    #[test]
    fn days_are_always_rejected(n in 0u64..100_000) {
        let text = format!("{n}d");
        prop_assert!(Duration::parse(&text).is_err());
    }

    #[test]
    fn parser_agrees_with_the_schema_pattern(text in "[0-9hmsd.+-]{0,8}") {
        // The schema pattern is ^([0-9]+|([0-9]+[hms])+)$; the parser must accept exactly that
        // language (within the length limit).
        let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        let mut groups_ok = !text.is_empty();
        let mut seen_digit = false;
        for b in text.bytes() {
            match b {
                b'0'..=b'9' => seen_digit = true,
                b'h' | b'm' | b's' if seen_digit => seen_digit = false,
                _other => { groups_ok = false; break; }
            }
        }
        if seen_digit && !digits_only { groups_ok = false; }
        let matches = digits_only || groups_ok;
        prop_assert_eq!(Duration::parse(&text).is_ok(), matches, "{:?}", text);
    }
}
