//! The pruned-by discriminator: the one fact that tells kopiur's own deletes (retention,
//! failed history, a replaced run) from everyone else's. Anything it does not recognize is
//! external, because misreading an external delete as a prune would bypass the breaker.
use std::collections::BTreeMap;

use kopiur_api::names::{annotation, pruned_by as value};

/// The prune kinds this version stamps. The next-tier values (`policy-cascade`,
/// `replication-retention`) are deliberately not recognized until the features that stamp them
/// ship: nothing legitimate writes them yet, so reading them as external is the safe side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PruneKind {
    Retention,
    FailedHistory,
    ReplacedRun,
}

impl PruneKind {
    pub const ALL: [PruneKind; 3] = [PruneKind::Retention, PruneKind::FailedHistory, PruneKind::ReplacedRun];

    /// The annotation value, stamped immediately before kopiur's own DELETE.
    pub fn as_str(self) -> &'static str {
        match self {
            PruneKind::Retention => value::RETENTION,
            PruneKind::FailedHistory => value::FAILED_HISTORY,
            PruneKind::ReplacedRun => value::REPLACED_RUN,
        }
    }
}

/// Who asked for a Snapshot's deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrunedBy {
    /// kopiur's own prune: never counted, never held, never cascade-retained.
    Operator(PruneKind),
    /// Everything else, including an unknown value and a missing annotation.
    External,
}

impl PrunedBy {
    pub fn is_external(self) -> bool {
        match self {
            PrunedBy::Operator(_) => false,
            PrunedBy::External => true,
        }
    }
}

/// Classify a raw annotation value. Comparison is exact: no trimming, no case folding, so a
/// near-miss such as `Retention` or `retention ` stays external.
pub fn classify(raw: Option<&str>) -> PrunedBy {
    match raw {
        Some(v) => PruneKind::ALL.into_iter().find(|k| k.as_str() == v).map_or(PrunedBy::External, PrunedBy::Operator),
        None => PrunedBy::External,
    }
}

/// Classify from an object's annotations.
pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> PrunedBy {
    classify(annotations.and_then(|a| a.get(annotation::PRUNED_BY)).map(String::as_str))
}

/// The metadata patch kopiur sends before its own DELETE. If this patch fails, the DELETE must
/// not be sent: an unstamped prune would read as external.
pub fn stamp_patch(kind: PruneKind) -> serde_json::Value {
    serde_json::json!({ "metadata": { "annotations": { annotation::PRUNED_BY: kind.as_str() } } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognized_values_are_operator_prunes() {
        assert_eq!(classify(Some("retention")), PrunedBy::Operator(PruneKind::Retention));
        assert_eq!(classify(Some("failed-history")), PrunedBy::Operator(PruneKind::FailedHistory));
        assert_eq!(classify(Some("replaced-run")), PrunedBy::Operator(PruneKind::ReplacedRun));
    }

    #[test]
    fn missing_unknown_and_near_miss_values_are_external() {
        for raw in [None, Some(""), Some("Retention"), Some("retention "), Some("user")]
            .into_iter()
            .chain([value::POLICY_CASCADE, value::REPLICATION_RETENTION].map(Some))
        {
            assert_eq!(classify(raw), PrunedBy::External, "{raw:?}");
        }
    }

    #[test]
    fn reads_the_annotation_key() {
        let mut a = BTreeMap::new();
        assert_eq!(from_annotations(None), PrunedBy::External);
        assert_eq!(from_annotations(Some(&a)), PrunedBy::External);
        a.insert(annotation::PRUNED_BY.to_string(), "failed-history".to_string());
        assert_eq!(from_annotations(Some(&a)), PrunedBy::Operator(PruneKind::FailedHistory));
    }

    #[test]
    fn stamp_round_trips_through_classify() {
        for kind in PruneKind::ALL {
            let patch = stamp_patch(kind);
            let v = patch["metadata"]["annotations"][annotation::PRUNED_BY].as_str();
            assert_eq!(classify(v), PrunedBy::Operator(kind));
        }
    }
}
