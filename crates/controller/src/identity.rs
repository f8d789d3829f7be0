//! Who kopiur is on the cluster: the field manager of its server-side applies and the name of the
//! mover's ServiceAccount and ClusterRole. Shared by every kind, so it lives at the crate root.

pub const FIELD_MANAGER: &str = "kopiur-controller";
pub const MOVER_SERVICE_ACCOUNT: &str = "kopiur-mover";
pub const MOVER_CLUSTER_ROLE: &str = "kopiur-mover";
