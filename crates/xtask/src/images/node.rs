//! The test environment's node images (`--node-images`): the pod sandbox and a busybox shell,
//! made of Debian's static busybox.
use std::collections::BTreeMap;

use super::tar::Entry;
use super::{Arch, named_reference, oci};

/// Where Debian's `busybox-static` installs its binary, and where the node images carry it.
pub const BUSYBOX: &str = "/bin/busybox";
/// The pod sandbox's user, as in the upstream pause image (no `/etc/passwd` needed: numeric).
pub const PAUSE_USER: &str = "65535:65535";
/// The busybox image's `PATH`: everything is in `/bin`.
pub const NODE_PATH_ENV: &str = "/bin";
/// The applets the busybox image links to `/bin/busybox` besides `/bin/sh`. A shell needs none
/// of them (busybox's `sh` runs its applets without a `PATH` lookup, through `/proc/self/exe`);
/// they are for a container whose command names an applet itself (`command: ["sleep", "60"]`).
pub const BUSYBOX_APPLETS: &[&str] = &[
    "cat",
    "chmod",
    "chown",
    "cp",
    "dd",
    "echo",
    "env",
    "false",
    "find",
    "grep",
    "head",
    "id",
    "ln",
    "ls",
    "mkdir",
    "mv",
    "rm",
    "rmdir",
    "sha256sum",
    "sleep",
    "stat",
    "sync",
    "tail",
    "test",
    "touch",
    "true",
    "wc",
];
/// The registry and tag [`build_for_node`] builds with. containerd and the CRI keep a name with
/// a `localhost/` host part as written; a bare name would be normalised to a default registry.
pub const NODE_REGISTRY: &str = "localhost";
pub const NODE_TAG: &str = "testenv";
/// What [`build_for_node`] writes next to the archives for the test harness.
pub const NODE_IMAGES_JSON: &str = "node-images.json";

/// The test environment's own images (`--node-images`), for its kubelet + containerd node:
/// never shipped, amd64 only, made of Debian's `busybox-static`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// The pod sandbox image containerd starts for every pod (`sandbox_image`).
    Pause,
    /// A shell and the usual tools for test workloads.
    Busybox,
}

impl NodeKind {
    pub const ALL: [NodeKind; 2] = [NodeKind::Pause, NodeKind::Busybox];

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Pause => "kopiur-testenv-pause",
            NodeKind::Busybox => "kopiur-testenv-busybox",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            NodeKind::Pause => "kopiur test environment only: pod sandbox (busybox sleep infinity)",
            NodeKind::Busybox => "kopiur test environment only: busybox shell for test workloads",
        }
    }
}

pub fn node_run_config(kind: NodeKind, version: &str) -> oci::RunConfig {
    let labels = BTreeMap::from(
        [
            ("org.opencontainers.image.title", kind.name()),
            ("org.opencontainers.image.description", kind.description()),
            ("org.opencontainers.image.version", version),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let (user, entrypoint) = match kind {
        NodeKind::Pause => (PAUSE_USER, vec![BUSYBOX.to_string(), "sleep".into(), "infinity".into()]),
        NodeKind::Busybox => ("0:0", vec!["/bin/sh".to_string()]),
    };
    oci::RunConfig {
        user: user.into(),
        env: vec![format!("PATH={NODE_PATH_ENV}")],
        entrypoint,
        working_dir: "/".into(),
        labels,
    }
}

/// A node image: a layer with `/bin/busybox` (the same in both images), and for the busybox
/// image a second one with `/bin/sh` and the applet links and `/tmp`.
pub fn node_image(
    kind: NodeKind,
    registry: Option<&str>,
    tag: &str,
    version: &str,
    epoch: u64,
    busybox: Vec<u8>,
) -> oci::Image {
    let base = oci::Layer {
        comment: "busybox-static: /bin/busybox".into(),
        entries: vec![Entry::file(BUSYBOX, 0o755, busybox)],
    };
    let mut layers = vec![base];
    if kind == NodeKind::Busybox {
        let mut entries = vec![Entry::symlink("bin/sh", "busybox"), Entry::dir("tmp", 0o1777)];
        entries.extend(BUSYBOX_APPLETS.iter().map(|a| Entry::symlink(&format!("bin/{a}"), "busybox")));
        layers
            .push(oci::Layer { comment: format!("/bin/sh and {} applet links, /tmp", BUSYBOX_APPLETS.len()), entries });
    }
    oci::Image {
        reference: named_reference(kind.name(), registry, tag),
        platform: Arch::Amd64.platform(),
        run: node_run_config(kind, version),
        layers,
        epoch,
    }
}
