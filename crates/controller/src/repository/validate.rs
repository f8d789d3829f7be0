//! Reconcile-time (R) checks on one repository (docs/design/api-contract.md §0 "R", §4.1, §4.6, §2.6, §1.5):
//! what CEL cannot express. A failed check parks the repository like a gating field
//! (`next::refuse`: phase `Pending`, `Ready=False`, `Stalled=True`, one Warning Event per
//! generation, no Job), with reason
//! - `InvalidSpec` when a `spec.create` algorithm name is not one kopia knows, or a mover
//!   resource request is above its limit;
//! - `InvalidSchedule` when `spec.scheduleDefaults.timezone` is not in the tz database.
//!
//! Pure: the decision is unit-tested here; the shell only writes what it returns.
use k8s_openapi::api::core::v1::ResourceRequirements;
use kopiur_api::names::reason;
use kopiur_api::repository::RepositoryCommonSpec;
use kopiur_kopia::algorithms::Algorithm;

/// Why the repository is refused: the Ready/Stalled reason and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub message: String,
}

/// The first failing class of R check, every problem of that class in one message (`; `
/// between them). `InvalidSpec` is reported before `InvalidSchedule`.
pub fn check(spec: &RepositoryCommonSpec) -> Option<Invalid> {
    let mut bad = algorithm_names(spec);
    bad.extend(resource_bounds(spec));
    if !bad.is_empty() {
        return Some(Invalid { reason: reason::INVALID_SPEC, message: bad.join("; ") });
    }
    schedule_timezone(spec).map(|message| Invalid { reason: reason::INVALID_SCHEDULE, message })
}

/// `spec.create.{encryption, hash, splitter, ecc.algorithm}` must be names kopia accepts.
pub fn algorithm_names(spec: &RepositoryCommonSpec) -> Vec<String> {
    let c = &spec.create;
    let fields = [
        ("spec.create.encryption", Algorithm::Encryption, c.encryption.as_deref()),
        ("spec.create.hash", Algorithm::BlockHash, c.hash.as_deref()),
        ("spec.create.splitter", Algorithm::ObjectSplitter, c.splitter.as_deref()),
        ("spec.create.ecc.algorithm", Algorithm::Ecc, c.ecc.as_ref().map(|e| e.algorithm.as_str())),
    ];
    fields
        .into_iter()
        .filter_map(|(path, alg, value)| {
            let v = value?;
            (!alg.is_known(v)).then(|| {
                format!(
                    "{path}: {v:?} is not a kopia {}, use one of {} (create.* is immutable once set)",
                    alg.what(),
                    alg.known().join(", ")
                )
            })
        })
        .collect()
}

/// Mover resource requests must not exceed their limits (docs/design/api-contract.md §2.6, §4.6): `spec.moverDefaults`
/// and the inline `spec.maintenance.mover`. A quantity that does not parse is left to the
/// apiserver's own Job validation.
pub fn resource_bounds(spec: &RepositoryCommonSpec) -> Vec<String> {
    let sets = [
        ("spec.moverDefaults.resources", spec.mover_defaults.as_ref().and_then(|m| m.resources.as_ref())),
        ("spec.maintenance.mover.resources", spec.maintenance.mover.as_ref().and_then(|m| m.resources.as_ref())),
    ];
    sets.into_iter().filter_map(|(path, r)| r.and_then(|r| requests_above_limits(path, r))).collect()
}

fn requests_above_limits(path: &str, r: &ResourceRequirements) -> Option<String> {
    let (Some(requests), Some(limits)) = (&r.requests, &r.limits) else {
        return None;
    };
    let over: Vec<String> = requests
        .iter()
        .filter_map(|(name, req)| {
            let lim = limits.get(name)?;
            let (a, b) = (parse_quantity(&req.0)?, parse_quantity(&lim.0)?);
            (a > b).then(|| format!("requests.{name} {} is above limits.{name} {}", req.0, lim.0))
        })
        .collect();
    (!over.is_empty()).then(|| format!("{path}: {} (a request must not exceed its limit)", over.join(", ")))
}

/// `spec.scheduleDefaults.timezone` must exist in the tz database (docs/design/api-contract.md §1.5). The message is the
/// one docs/design/api-contract.md §15 quotes.
pub fn schedule_timezone(spec: &RepositoryCommonSpec) -> Option<String> {
    let tz = spec.schedule_defaults.as_ref()?.timezone.as_deref()?;
    kopiur_api::domain::cron::parse_timezone(tz).err().map(|e| format!("spec.scheduleDefaults.timezone: {e}"))
}

/// A Kubernetes quantity in nano-units (rounded up, as the apiserver rounds below 1n), for
/// comparison only. `None` for a negative, malformed or absurdly large value.
pub fn parse_quantity(s: &str) -> Option<u128> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') || int.len() + frac.len() > 30 {
        return None;
    }
    let digits: u128 = format!("{int}{frac}").parse().ok()?;
    let frac_len = frac.len() as i32;
    let binary = |shift: u32| -> Option<u128> {
        let scaled = digits.checked_mul(1u128 << shift)?.checked_mul(1_000_000_000)?;
        Some(scaled.div_ceil(10u128.checked_pow(frac_len as u32)?))
    };
    let exp10: i32 = match suffix {
        "Ki" => return binary(10),
        "Mi" => return binary(20),
        "Gi" => return binary(30),
        "Ti" => return binary(40),
        "Pi" => return binary(50),
        "Ei" => return binary(60),
        "" => 0,
        "n" => -9,
        "u" => -6,
        "m" => -3,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        "T" => 12,
        "P" => 15,
        "E" => 18,
        other => {
            let e = other.strip_prefix('e').or_else(|| other.strip_prefix('E'))?;
            e.parse::<i32>().ok().filter(|e| e.abs() <= 40)?
        }
    };
    let p = 9 + exp10 - frac_len;
    if p >= 0 {
        digits.checked_mul(10u128.checked_pow(p as u32)?)
    } else {
        let d = 10u128.checked_pow((-p) as u32)?;
        Some(digits.div_ceil(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: serde_json::Value) -> RepositoryCommonSpec {
        let mut v = json!({
            "backend": {"s3": {"bucket": "bucket"}},
            "encryption": {"passwordSecretRef": {"name": "kopia"}},
        });
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in e {
                m.insert(k.clone(), x.clone());
            }
        }
        serde_json::from_value(v).expect("a valid repository spec")
    }

    #[test]
    fn known_algorithm_names_pass_and_every_unknown_one_is_named_with_the_valid_ones() {
        let ok = spec(json!({"create": {"encryption": "CHACHA20-POLY1305-HMAC-SHA256", "hash": "BLAKE3-256",
            "splitter": "DYNAMIC-1M-BUZHASH", "ecc": {"algorithm": "REED-SOLOMON-CRC32", "overheadPercent": 2}}}));
        assert_eq!(check(&ok), None);
        assert_eq!(check(&spec(json!({}))), None, "kopia's defaults need no names");

        let bad = spec(json!({"create": {"encryption": "AES-NOPE", "hash": "blake3-256",
            "splitter": "DYNAMIC-1M-BUZHASH", "ecc": {"algorithm": "RS"}}}));
        let got = check(&bad).expect("refused");
        assert_eq!(got.reason, "InvalidSpec");
        let parts: Vec<&str> = got.message.split("; ").collect();
        assert_eq!(
            parts[0],
            "spec.create.encryption: \"AES-NOPE\" is not a kopia encryption algorithm, use one of \
             AES256-GCM-HMAC-SHA256, CHACHA20-POLY1305-HMAC-SHA256 (create.* is immutable once set)"
        );
        assert!(
            parts[1]
                .starts_with("spec.create.hash: \"blake3-256\" is not a kopia hash algorithm, use one of BLAKE2B-256,")
        );
        assert!(parts[1].contains("BLAKE3-256"), "the valid names are listed: {}", parts[1]);
        assert!(!got.message.contains("spec.create.splitter"), "a known splitter is not reported");
        assert!(got.message.contains("spec.create.ecc.algorithm: \"RS\" is not a kopia error-correction algorithm, use one of REED-SOLOMON-CRC32 ("));
        assert_eq!(algorithm_names(&bad).len(), 3);
    }

    #[test]
    fn a_request_above_its_limit_is_invalid_spec_on_mover_defaults_and_the_maintenance_mover() {
        let fine = spec(json!({"moverDefaults": {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "0.5", "memory": "1073741824"}}}}));
        assert_eq!(check(&fine), None, "equal values in other notations are not above");
        let only_requests = spec(json!({"moverDefaults": {"resources": {"requests": {"cpu": "64"}}}}));
        assert_eq!(check(&only_requests), None, "no limit, nothing to exceed");
        let other_keys =
            spec(json!({"moverDefaults": {"resources": {"requests": {"cpu": "2"}, "limits": {"memory": "1Mi"}}}}));
        assert_eq!(check(&other_keys), None);

        let bad = spec(json!({
            "moverDefaults": {"resources": {"requests": {"cpu": "2", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
            "maintenance": {"mover": {"resources": {"requests": {"memory": "1.5Gi"}, "limits": {"memory": "1G"}}}},
        }));
        let got = check(&bad).expect("refused");
        assert_eq!(got.reason, "InvalidSpec");
        assert_eq!(
            got.message,
            "spec.moverDefaults.resources: requests.cpu 2 is above limits.cpu 1 (a request must not exceed its \
             limit); spec.maintenance.mover.resources: requests.memory 1.5Gi is above limits.memory 1G (a request \
             must not exceed its limit)"
        );
    }

    #[test]
    fn an_unknown_schedule_default_zone_is_invalid_schedule_with_the_spec_message() {
        let mars = spec(json!({"scheduleDefaults": {"timezone": "Mars/Olympus"}}));
        assert_eq!(
            check(&mars),
            Some(Invalid {
                reason: "InvalidSchedule",
                message: "spec.scheduleDefaults.timezone: unknown IANA time zone \"Mars/Olympus\"".into()
            })
        );
        assert_eq!(check(&spec(json!({"scheduleDefaults": {"timezone": "Europe/Berlin"}}))), None);
        assert_eq!(check(&spec(json!({"scheduleDefaults": {"jitter": "5m"}}))), None);
        // InvalidSpec wins over InvalidSchedule: one reason at a time.
        let both = spec(json!({"scheduleDefaults": {"timezone": "Mars/Olympus"}, "create": {"hash": "MD5"}}));
        assert_eq!(check(&both).map(|i| i.reason), Some("InvalidSpec"));
    }

    #[test]
    fn quantities_compare_across_notations() {
        let q = |s| parse_quantity(s).unwrap_or_else(|| panic!("{s} parses"));
        assert_eq!(q("1"), 1_000_000_000);
        assert_eq!(q("100m"), q("0.1"));
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1G"), q("1e9"));
        assert_eq!(q("1G"), q("1E9"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("+2"), q("2"));
        assert_eq!(q("1n"), 1);
        assert_eq!(q("0.1n"), 1, "rounded up below 1n");
        assert!(q("1Gi") > q("1G"));
        assert!(q("1E") > q("1P"));
        assert!(q("1001m") > q("1"));
        for bad in ["", "-1", "abc", "1.2.3", "1Xi", "1e999", "."] {
            assert_eq!(parse_quantity(bad), None, "{bad:?}");
        }
    }
}
