//! The namespace axis: what a namespace teardown does to the Snapshots in it. The default,
//! Orphan, keeps the kopia data so `kubectl delete ns` is never a silent data-loss event.
use kopiur_api::repository::OnNamespaceDelete;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NamespaceAxis {
    /// The namespace is not being deleted; the namespace axis has no say.
    NotTerminating,
    /// Terminating under `onNamespaceDelete: Orphan`: drop the CR, keep the data (row D7).
    Orphan,
    /// Terminating under `onNamespaceDelete: Delete`: an external destructive deletion that
    /// still passes through the mass-deletion breaker.
    Delete,
}

pub fn axis(ns_terminating: bool, on_namespace_delete: OnNamespaceDelete) -> NamespaceAxis {
    match (ns_terminating, on_namespace_delete) {
        (false, _) => NamespaceAxis::NotTerminating,
        (true, OnNamespaceDelete::Orphan) => NamespaceAxis::Orphan,
        (true, OnNamespaceDelete::Delete) => NamespaceAxis::Delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_orphans_on_teardown() {
        assert_eq!(axis(true, OnNamespaceDelete::default()), NamespaceAxis::Orphan);
        assert_eq!(axis(true, OnNamespaceDelete::Delete), NamespaceAxis::Delete);
        assert_eq!(axis(false, OnNamespaceDelete::Orphan), NamespaceAxis::NotTerminating);
        assert_eq!(axis(false, OnNamespaceDelete::Delete), NamespaceAxis::NotTerminating);
    }
}
