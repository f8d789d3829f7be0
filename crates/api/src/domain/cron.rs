//! Five-field cron with deterministic `H`, per-slot jitter and DST-correct evaluation in an
//! IANA zone (docs/design/api-contract.md §1.4–1.5, docs/design/pipeline.md §7.1).
//!
//! - `H` as a whole field becomes `min + (rotate_left(fnv1a64(uid), 13·i) mod size)` with
//!   i = 0 (minute) … 4 (day-of-week); day-of-month `H` maps into 1–28. `H/n` starts a step at
//!   a hashed offset below `n`. `H(a-b)` is rejected.
//! - Jitter: `fnv1a64(uid + "/" + slot unix seconds) mod jitter`, so every slot gets its own
//!   deterministic offset in `[0, jitter)`.
//! - Evaluation is on local wall-clock time: a local time that does not exist (spring
//!   forward) is skipped; a repeated local time (fall back) fires once, at its first occurrence.

use std::str::FromStr;

use chrono::{
    DateTime, Datelike, Duration as ChronoDuration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

use crate::domain::hash::fnv1a64;
use crate::{Duration, Error};

/// The five cron fields, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl Field {
    const ALL: [Field; 5] = [Field::Minute, Field::Hour, Field::DayOfMonth, Field::Month, Field::DayOfWeek];

    fn index(self) -> u32 {
        match self {
            Self::Minute => 0,
            Self::Hour => 1,
            Self::DayOfMonth => 2,
            Self::Month => 3,
            Self::DayOfWeek => 4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::DayOfMonth => "day-of-month",
            Self::Month => "month",
            Self::DayOfWeek => "day-of-week",
        }
    }

    /// Accepted range (day-of-week also accepts 7 for Sunday).
    fn range(self) -> (u32, u32) {
        match self {
            Self::Minute => (0, 59),
            Self::Hour => (0, 23),
            Self::DayOfMonth => (1, 31),
            Self::Month => (1, 12),
            Self::DayOfWeek => (0, 7),
        }
    }

    /// Range `H` maps into.
    fn hash_range(self) -> (u32, u32) {
        match self {
            Self::DayOfMonth => (1, 28),
            Self::DayOfWeek => (0, 6),
            Self::Minute | Self::Hour | Self::Month => self.range(),
        }
    }

    fn names(self) -> &'static [&'static str] {
        match self {
            Self::Month => &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
            Self::DayOfWeek => &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
            Self::Minute | Self::Hour | Self::DayOfMonth => &[],
        }
    }
}

/// A parsed schedule with every `H` already resolved for one object UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    expr: String,
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    // Vixie semantics: when both day fields are restricted, either may match.
    dom_restricted: bool,
    dow_restricted: bool,
}

fn err(message: String) -> Error {
    Error::InvalidCron(message)
}

/// The hashed value for a whole-field `H`.
pub fn hashed_value(uid: &str, field: Field) -> u32 {
    let (min, max) = field.hash_range();
    let size = u64::from(max - min + 1);
    let rotated = fnv1a64(uid.as_bytes()).rotate_left(13 * field.index());
    min + (rotated % size) as u32
}

fn expand_macro(expr: &str) -> Option<&'static str> {
    match expr {
        "@yearly" | "@annually" => Some("0 0 1 1 *"),
        "@monthly" => Some("0 0 1 * *"),
        "@weekly" => Some("0 0 * * 0"),
        "@daily" | "@midnight" => Some("0 0 * * *"),
        "@hourly" => Some("0 * * * *"),
        _other => None,
    }
}

fn parse_number(field: Field, text: &str) -> Result<u32, Error> {
    let upper = text.to_ascii_uppercase();
    if let Some(pos) = field.names().iter().position(|n| *n == upper) {
        let base = match field {
            Field::Month => 1,
            Field::DayOfWeek | Field::Minute | Field::Hour | Field::DayOfMonth => 0,
        };
        return Ok(base + pos as u32);
    }
    let value: u32 = text.parse().map_err(|_| err(format!("{} {text:?} is not a number", field.name())))?;
    let (min, max) = field.range();
    if value < min || value > max {
        return Err(err(format!("{} {value} out of range {min}-{max}", field.name())));
    }
    Ok(value)
}

fn parse_step(field: Field, text: &str) -> Result<u32, Error> {
    let step: u32 = text.parse().map_err(|_| err(format!("{} step {text:?} is not a number", field.name())))?;
    if step == 0 {
        return Err(err(format!("{} step must be at least 1", field.name())));
    }
    Ok(step)
}

/// Parses one field into a bit set of allowed values.
fn parse_field(field: Field, text: &str, uid: &str) -> Result<u64, Error> {
    let (min, max) = field.range();
    let mut bits = 0u64;
    for part in text.split(',') {
        if part.is_empty() {
            return Err(err(format!("{} has an empty list item", field.name())));
        }
        let (base, step) = match part.split_once('/') {
            Some((base, step)) => (base, Some(parse_step(field, step)?)),
            None => (part, None),
        };
        let (lo, hi) = if base == "*" {
            (min, if field == Field::DayOfWeek { 6 } else { max })
        } else if base == "H" {
            let v = hashed_value(uid, field);
            match step {
                None => (v, v),
                Some(n) => {
                    // A hashed start below the step, then every n-th value.
                    let (hmin, _) = field.hash_range();
                    let rotated = fnv1a64(uid.as_bytes()).rotate_left(13 * field.index());
                    (hmin + (rotated % u64::from(n)) as u32, if field == Field::DayOfWeek { 6 } else { max })
                }
            }
        } else if base.starts_with('H') {
            return Err(err(format!("{} {base:?}: only H and H/<step> are supported", field.name())));
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, b) = (parse_number(field, a)?, parse_number(field, b)?);
            if a > b {
                return Err(err(format!("{} range {a}-{b} is backwards", field.name())));
            }
            (a, b)
        } else {
            let v = parse_number(field, base)?;
            match step {
                // `5/15` means from 5 to the end in steps of 15.
                Some(_) => (v, if field == Field::DayOfWeek { 6 } else { max }),
                None => (v, v),
            }
        };
        let step = step.unwrap_or(1);
        let mut v = lo;
        while v <= hi {
            // Day-of-week 7 is Sunday.
            let bit = if field == Field::DayOfWeek && v == 7 { 0 } else { v };
            bits |= 1u64 << bit;
            v += step;
        }
    }
    Ok(bits)
}

impl Cron {
    /// Parses a cron expression, resolving `H` for the object with this UID.
    pub fn parse(expr: &str, uid: &str) -> Result<Self, Error> {
        let trimmed = expr.trim();
        let expanded = if trimmed.starts_with('@') {
            expand_macro(trimmed).ok_or_else(|| err(format!("unknown macro {trimmed:?}")))?
        } else {
            trimmed
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(err(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                parts.len()
            )));
        }
        let mut sets = [0u64; 5];
        for (field, text) in Field::ALL.iter().zip(&parts) {
            sets[field.index() as usize] = parse_field(*field, text, uid)?;
        }
        Ok(Self {
            expr: expr.to_owned(),
            minutes: sets[0],
            hours: sets[1] as u32,
            days_of_month: sets[2] as u32,
            months: sets[3] as u16,
            days_of_week: sets[4] as u8,
            dom_restricted: !parts[2].starts_with('*'),
            dow_restricted: !parts[4].starts_with('*'),
        })
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        let dom = self.days_of_month & (1 << date.day()) != 0;
        let dow = self.days_of_week & (1 << date.weekday().num_days_from_sunday()) != 0;
        match (self.dom_restricted, self.dow_restricted) {
            (true, true) => dom || dow,
            (true, false) | (false, true) | (false, false) => dom && dow,
        }
    }

    /// The first slot strictly after `after`, evaluated on wall-clock time in `tz`.
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Result<DateTime<Utc>, Error> {
        let local = after.with_timezone(&tz).naive_local();
        let start =
            local.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(local) + ChronoDuration::minutes(1);
        let horizon_year = start.year() + 8;
        let mut t = start;
        while t.year() <= horizon_year {
            if self.months & (1 << t.month()) == 0 {
                t = first_of_next_month(t);
                continue;
            }
            if !self.day_matches(t.date()) {
                t = next_day(t);
                continue;
            }
            if self.hours & (1 << t.hour()) == 0 {
                t = next_hour(t);
                continue;
            }
            if self.minutes & (1 << t.minute()) == 0 {
                t += ChronoDuration::minutes(1);
                continue;
            }
            match tz.from_local_datetime(&t) {
                LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => {
                    let at = at.with_timezone(&Utc);
                    if at > after {
                        return Ok(at);
                    }
                }
                // Skipped by a spring-forward transition: this local time never happens.
                LocalResult::None => {}
            }
            t += ChronoDuration::minutes(1);
        }
        Err(Error::NoNextSlot { cron: self.expr.clone(), after: after.to_rfc3339() })
    }
}

fn first_of_next_month(t: NaiveDateTime) -> NaiveDateTime {
    let (y, m) = if t.month() == 12 { (t.year() + 1, 1) } else { (t.year(), t.month() + 1) };
    NaiveDate::from_ymd_opt(y, m, 1).and_then(|d| d.and_hms_opt(0, 0, 0)).unwrap_or(t + ChronoDuration::days(28))
}

fn next_day(t: NaiveDateTime) -> NaiveDateTime {
    (t.date() + ChronoDuration::days(1)).and_hms_opt(0, 0, 0).unwrap_or(t + ChronoDuration::days(1))
}

fn next_hour(t: NaiveDateTime) -> NaiveDateTime {
    let truncated = t.with_minute(0).unwrap_or(t);
    truncated + ChronoDuration::hours(1)
}

/// Parses an IANA zone name (reason `InvalidSchedule` when unknown).
pub fn parse_timezone(name: &str) -> Result<Tz, Error> {
    Tz::from_str(name).map_err(|_| Error::UnknownTimeZone(name.to_owned()))
}

/// Time-zone precedence: the object's own, then the repository's `scheduleDefaults`, then UTC.
pub fn effective_timezone<'a>(own: Option<&'a str>, repository_default: Option<&'a str>) -> &'a str {
    own.or(repository_default).unwrap_or("UTC")
}

/// The deterministic offset of one slot, in `[0, jitter)`; zero when jitter is zero.
pub fn jitter_offset(uid: &str, slot: DateTime<Utc>, jitter: &Duration) -> ChronoDuration {
    let j = jitter.as_secs();
    if j == 0 {
        return ChronoDuration::zero();
    }
    let key = format!("{uid}/{}", slot.timestamp());
    ChronoDuration::seconds((fnv1a64(key.as_bytes()) % j) as i64)
}

/// When a slot actually fires: the slot plus its jitter offset.
pub fn fire_time(uid: &str, slot: DateTime<Utc>, jitter: Option<&Duration>) -> DateTime<Utc> {
    match jitter {
        Some(j) => slot + jitter_offset(uid, slot, j),
        None => slot,
    }
}

/// The next slot and its fire time, as pinned in `status.nextSchedule`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextSlot {
    /// The unjittered cron instant.
    pub slot: DateTime<Utc>,
    /// `slot` plus the jitter offset.
    pub at: DateTime<Utc>,
}

pub fn next_slot(
    cron: &Cron,
    uid: &str,
    after: DateTime<Utc>,
    tz: Tz,
    jitter: Option<&Duration>,
) -> Result<NextSlot, Error> {
    let slot = cron.next_after(after, tz)?;
    Ok(NextSlot { slot, at: fire_time(uid, slot, jitter) })
}
