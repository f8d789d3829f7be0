//! Cron with deterministic `H` and jitter, evaluated in IANA zones (docs/design/api-contract.md §1.4,
//! docs/design/pipeline.md §7.1).

use chrono::{DateTime, Duration as ChronoDuration, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use kopiur_api::Duration;
use kopiur_api::domain::cron::{
    Cron, Field, effective_timezone, fire_time, hashed_value, jitter_offset, next_slot, parse_timezone,
};
use kopiur_api::domain::hash::fnv1a64;
use proptest::prelude::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn slots(cron: &Cron, tz: Tz, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    for _ in 0..n {
        t = cron.next_after(t, tz).unwrap();
        out.push(t);
    }
    out
}

#[test]
fn plain_fields_in_utc() {
    let c = Cron::parse("30 2 * * *", "uid").unwrap();
    assert_eq!(c.next_after(utc("2026-03-01T00:00:00Z"), Tz::UTC).unwrap(), utc("2026-03-01T02:30:00Z"));
    // Strictly after: a slot equal to `after` is not returned.
    assert_eq!(c.next_after(utc("2026-03-01T02:30:00Z"), Tz::UTC).unwrap(), utc("2026-03-02T02:30:00Z"));
    let every15 = Cron::parse("*/15 * * * *", "uid").unwrap();
    assert_eq!(
        slots(&every15, Tz::UTC, utc("2026-03-01T00:07:00Z"), 3),
        vec![utc("2026-03-01T00:15:00Z"), utc("2026-03-01T00:30:00Z"), utc("2026-03-01T00:45:00Z")]
    );
}

#[test]
fn macros_ranges_lists_and_names() {
    let weekly = Cron::parse("@weekly", "u").unwrap();
    // 2026-03-01 is a Sunday.
    assert_eq!(weekly.next_after(utc("2026-02-27T12:00:00Z"), Tz::UTC).unwrap(), utc("2026-03-01T00:00:00Z"));
    let weekdays = Cron::parse("0 9 * * MON-FRI", "u").unwrap();
    assert_eq!(weekdays.next_after(utc("2026-02-28T10:00:00Z"), Tz::UTC).unwrap(), utc("2026-03-02T09:00:00Z"));
    let list = Cron::parse("0 0 1,15 JAN *", "u").unwrap();
    assert_eq!(list.next_after(utc("2026-01-02T00:00:00Z"), Tz::UTC).unwrap(), utc("2026-01-15T00:00:00Z"));
    let sunday7 = Cron::parse("0 0 * * 7", "u").unwrap();
    assert_eq!(sunday7.next_after(utc("2026-02-27T12:00:00Z"), Tz::UTC).unwrap(), utc("2026-03-01T00:00:00Z"));
}

#[test]
fn day_of_month_or_day_of_week_when_both_restricted() {
    // Vixie cron: the 13th OR any Friday.
    let c = Cron::parse("0 0 13 * FRI", "u").unwrap();
    // 2026-03-06 is a Friday, before the 13th.
    assert_eq!(c.next_after(utc("2026-03-01T00:00:00Z"), Tz::UTC).unwrap(), utc("2026-03-06T00:00:00Z"));
}

#[test]
fn parse_errors_name_the_field_and_value() {
    let cases = [
        ("61 * * * *", "minute 61 out of range 0-59"),
        ("0 24 * * *", "hour 24 out of range 0-23"),
        ("0 0 0 * *", "day-of-month 0 out of range 1-31"),
        ("0 0 * 13 *", "month 13 out of range 1-12"),
        ("0 0 * * 8", "day-of-week 8 out of range 0-7"),
        ("*/5 * * *", "expected 5 fields"),
        ("0 0 * * * 2026", "expected 5 fields"),
        ("H(0-30) * * * *", "only H and H/<step>"),
        ("*/0 * * * *", "step must be at least 1"),
        ("@reboot", "unknown macro"),
    ];
    for (expr, expected) in cases {
        let msg = Cron::parse(expr, "u").unwrap_err().to_string();
        assert!(msg.contains(expected), "{expr}: {msg}");
    }
}

#[test]
fn never_matching_schedule_is_an_error_not_a_hang() {
    let c = Cron::parse("0 0 31 2 *", "u").unwrap();
    assert!(c.next_after(utc("2026-01-01T00:00:00Z"), Tz::UTC).is_err());
}

#[test]
fn h_golden_values() {
    // Pinned so a change to the hash or the field rotation is caught: replicas and older
    // operators must compute the same slots.
    let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
    let h = fnv1a64(uid.as_bytes());
    assert_eq!(hashed_value(uid, Field::Minute), (h % 60) as u32);
    assert_eq!(hashed_value(uid, Field::Hour), (h.rotate_left(13) % 24) as u32);
    assert_eq!(hashed_value(uid, Field::DayOfMonth), 1 + (h.rotate_left(26) % 28) as u32);
    assert_eq!(hashed_value(uid, Field::Month), 1 + (h.rotate_left(39) % 12) as u32);
    assert_eq!(hashed_value(uid, Field::DayOfWeek), (h.rotate_left(52) % 7) as u32);
    let c = Cron::parse("H H * * *", uid).unwrap();
    let slot = c.next_after(utc("2026-03-01T00:00:00Z"), Tz::UTC).unwrap();
    assert_eq!(slot.minute(), hashed_value(uid, Field::Minute));
    assert_eq!(slot.hour(), hashed_value(uid, Field::Hour));
    // Jitter: fnv1a64(uid + "/" + unix seconds) mod J.
    let slot = utc("2026-03-01T02:00:00Z");
    let j = Duration::parse("1h").unwrap();
    let expected = fnv1a64(format!("{uid}/{}", slot.timestamp()).as_bytes()) % 3600;
    assert_eq!(jitter_offset(uid, slot, &j), ChronoDuration::seconds(expected as i64));
}

#[test]
fn h_step_stays_on_its_grid() {
    let c = Cron::parse("H/15 * * * *", "some-uid").unwrap();
    let s = slots(&c, Tz::UTC, utc("2026-03-01T00:00:00Z"), 8);
    let first = s[0].minute();
    assert!(first < 15);
    for w in s.windows(2) {
        assert_eq!(w[1] - w[0], ChronoDuration::minutes(15));
    }
}

#[test]
fn day_of_month_h_is_within_1_to_28() {
    for i in 0..2000 {
        let v = hashed_value(&format!("uid-{i}"), Field::DayOfMonth);
        assert!((1..=28).contains(&v), "{v}");
    }
}

#[test]
fn zero_jitter_fires_on_the_slot() {
    let slot = utc("2026-03-01T02:00:00Z");
    assert_eq!(fire_time("u", slot, Some(&Duration::from_secs(0))), slot);
    assert_eq!(fire_time("u", slot, None), slot);
}

#[test]
fn spring_forward_skips_the_missing_local_time() {
    // Europe/Berlin jumps 02:00 -> 03:00 on 2026-03-29.
    let berlin = parse_timezone("Europe/Berlin").unwrap();
    let c = Cron::parse("30 2 * * *", "u").unwrap();
    let s = slots(&c, berlin, utc("2026-03-27T12:00:00Z"), 3);
    // 28th 02:30 CET (01:30Z); the 29th has no 02:30; 30th 02:30 CEST (00:30Z).
    assert_eq!(s, vec![utc("2026-03-28T01:30:00Z"), utc("2026-03-30T00:30:00Z"), utc("2026-03-31T00:30:00Z")]);
}

#[test]
fn fall_back_fires_a_repeated_local_time_once_at_its_first_occurrence() {
    // Europe/Berlin repeats 02:00-03:00 on 2026-10-25.
    let berlin = parse_timezone("Europe/Berlin").unwrap();
    let c = Cron::parse("30 2 * * *", "u").unwrap();
    let s = slots(&c, berlin, utc("2026-10-24T12:00:00Z"), 3);
    // 24th 02:30 would be before; 25th first 02:30 is CEST (00:30Z), the repeat (01:30Z) is skipped.
    assert_eq!(s, vec![utc("2026-10-25T00:30:00Z"), utc("2026-10-26T01:30:00Z"), utc("2026-10-27T01:30:00Z")]);
    // Hourly across the repeated hour: each wall-clock minute once.
    let hourly = Cron::parse("15 * * * *", "u").unwrap();
    let s = slots(&hourly, berlin, utc("2026-10-24T23:00:00Z"), 4);
    assert_eq!(
        s,
        vec![
            utc("2026-10-24T23:15:00Z"),
            utc("2026-10-25T00:15:00Z"),
            utc("2026-10-25T02:15:00Z"),
            utc("2026-10-25T03:15:00Z")
        ]
    );
}

#[test]
fn daily_local_time_is_stable_across_dst_in_a_named_zone() {
    let ny = parse_timezone("America/New_York").unwrap();
    let uid = "dst-check";
    let c = Cron::parse("H 9 * * *", uid).unwrap();
    let s = slots(&c, ny, utc("2026-03-05T00:00:00Z"), 10);
    for at in &s {
        let local = at.with_timezone(&ny);
        assert_eq!(local.hour(), 9);
        assert_eq!(local.minute(), hashed_value(uid, Field::Minute));
    }
    // The UTC hour moves by one at the 2026-03-08 transition.
    assert_eq!(s[0].hour(), 14);
    assert_eq!(s[9].hour(), 13);
}

#[test]
fn unknown_zone_is_rejected_and_precedence_is_object_then_repository_then_utc() {
    assert!(parse_timezone("Mars/Olympus").unwrap_err().to_string().contains("Mars/Olympus"));
    assert_eq!(effective_timezone(Some("Europe/Berlin"), Some("UTC")), "Europe/Berlin");
    assert_eq!(effective_timezone(None, Some("Asia/Tokyo")), "Asia/Tokyo");
    assert_eq!(effective_timezone(None, None), "UTC");
}

proptest! {
    #[test]
    fn same_uid_gives_the_same_slots(uid in "[a-f0-9-]{8,36}", start in 1_700_000_000i64..1_900_000_000) {
        let from = Utc.timestamp_opt(start, 0).unwrap();
        let a = Cron::parse("H H * * *", &uid).unwrap();
        let b = Cron::parse("H H * * *", &uid).unwrap();
        let jitter = Duration::parse("30m").unwrap();
        let x = next_slot(&a, &uid, from, Tz::UTC, Some(&jitter)).unwrap();
        let y = next_slot(&b, &uid, from, Tz::UTC, Some(&jitter)).unwrap();
        prop_assert_eq!(x, y);
        prop_assert!(x.at >= x.slot && x.at < x.slot + ChronoDuration::minutes(30));
    }

    #[test]
    fn slots_are_strictly_after_and_match_the_local_fields(uid in "[a-z0-9]{1,20}", start in 1_700_000_000i64..1_900_000_000,
                                                           zone in prop_oneof![Just("UTC"), Just("Europe/Berlin"), Just("America/New_York"), Just("Australia/Sydney")]) {
        let tz = parse_timezone(zone).unwrap();
        let from = Utc.timestamp_opt(start, 0).unwrap();
        let c = Cron::parse("H H * * *", &uid).unwrap();
        let slot = c.next_after(from, tz).unwrap();
        prop_assert!(slot > from);
        prop_assert!(slot - from <= ChronoDuration::hours(50));
        let local = slot.with_timezone(&tz);
        prop_assert_eq!(local.minute(), hashed_value(&uid, Field::Minute));
        prop_assert_eq!(local.hour(), hashed_value(&uid, Field::Hour));
    }
}

/// Kubernetes UIDs are random v4 UUIDs; derive such strings deterministically.
fn uuid_like(i: u32) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(i.to_le_bytes());
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-4{}-a{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], &hex[17..20], &hex[20..32])
}

#[test]
fn different_uids_spread_over_minutes_and_jitter() {
    let n = 600;
    let mut minute_counts = [0u32; 60];
    let mut hour_counts = [0u32; 24];
    let mut jitter_buckets = [0u32; 10];
    let slot = utc("2026-03-01T02:00:00Z");
    let jitter = Duration::parse("1h").unwrap();
    for i in 0..n {
        let uid = uuid_like(i);
        minute_counts[hashed_value(&uid, Field::Minute) as usize] += 1;
        hour_counts[hashed_value(&uid, Field::Hour) as usize] += 1;
        let off = jitter_offset(&uid, slot, &jitter).num_seconds();
        jitter_buckets[(off / 360) as usize] += 1;
    }
    // 600 uids over 60 minutes: expect ~10 each; a clumping hash would leave many empty.
    assert!(minute_counts.iter().filter(|c| **c == 0).count() <= 3, "{minute_counts:?}");
    assert!(*minute_counts.iter().max().unwrap() <= 30, "{minute_counts:?}");
    assert!(hour_counts.iter().all(|c| *c > 0), "{hour_counts:?}");
    assert!(jitter_buckets.iter().all(|c| (30..=90).contains(c)), "{jitter_buckets:?}");
}

#[test]
fn jitter_differs_per_slot_for_one_uid() {
    let j = Duration::parse("1h").unwrap();
    let offsets: std::collections::BTreeSet<i64> = (0..24)
        .map(|h| jitter_offset("one-uid", utc("2026-03-01T00:00:00Z") + ChronoDuration::hours(h), &j).num_seconds())
        .collect();
    assert!(offsets.len() > 12, "{offsets:?}");
}
