//! `cargo xtask images` without building anything: fixed fake inputs, the layout chain, the
//! digests' stability, and the Containerfiles and release workflow against the same contract.
use super::*;

fn fake(kind: Kind, epoch: u64, payload: &[u8]) -> oci::Image {
    let mut binaries = vec![(kind.name().to_string(), [b"\x7fELF fake ", payload].concat())];
    if kind.has_kopia() {
        binaries.push(("kopia".into(), b"fake kopia".to_vec()));
    }
    image(Inputs {
        kind,
        arch: Arch::Amd64,
        registry: Some("registry.example/team"),
        tag: "0.1.0",
        version: "0.1.0",
        epoch,
        ca_bundle: b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n".to_vec(),
        binaries,
    })
}

fn archive(img: &oci::Image) -> (oci::Layout, Vec<u8>) {
    let layout = oci::build(img).unwrap();
    let bytes = layout.archive(img.epoch).unwrap();
    (layout, bytes)
}

#[test]
fn same_inputs_give_the_same_digests_twice() {
    for kind in Kind::ALL {
        let (a, bytes_a) = archive(&fake(kind, 0, b"v1"));
        let (b, bytes_b) = archive(&fake(kind, 0, b"v1"));
        assert_eq!(a.manifest.digest, b.manifest.digest, "{kind:?} manifest");
        assert_eq!(a.config.digest, b.config.digest);
        assert_eq!(a.layers, b.layers);
        assert_eq!(oci::sha256(&bytes_a), oci::sha256(&bytes_b), "{kind:?} archive bytes");

        let (c, _) = archive(&fake(kind, 0, b"v2"));
        assert_ne!(a.manifest.digest, c.manifest.digest, "another binary is another image");
        assert_eq!(a.layers[0], c.layers[0], "the base layer does not depend on the binaries");
        let (d, _) = archive(&fake(kind, 1_700_000_000, b"v1"));
        assert_ne!(a.manifest.digest, d.manifest.digest, "SOURCE_DATE_EPOCH reaches mtimes and created");
    }
}

#[test]
fn both_images_share_the_base_layer() {
    let (c, _) = archive(&fake(Kind::Controller, 0, b"x"));
    let (m, _) = archive(&fake(Kind::Mover, 0, b"x"));
    assert_eq!(c.layers[0], m.layers[0]);
    assert_ne!(c.layers[1], m.layers[1]);
}

/// index.json -> manifest -> config + layers: every digest and size matches its blob, the
/// diff_ids match the uncompressed layers (checked by `oci::verify`, here also by hand).
#[test]
fn layout_chain_matches_the_blobs() {
    let img = fake(Kind::Mover, 0, b"x");
    let (layout, bytes) = archive(&img);
    let v = oci::verify(&bytes).unwrap();
    assert_eq!(v.reference, "registry.example/team/kopiur-mover:0.1.0");
    assert_eq!(v.manifest_digest, layout.manifest.digest);
    assert_eq!(v.platform, oci::Platform { architecture: "amd64".into(), os: "linux".into(), variant: None });

    let members = tar::read(&bytes).unwrap();
    let paths: Vec<&str> = members.iter().map(|m| m.path.as_str()).collect();
    let blob_names: Vec<String> = std::iter::once(&layout.manifest)
        .chain([&layout.config])
        .chain(&layout.layers)
        .map(|d| format!("blobs/sha256/{}", d.digest.trim_start_matches("sha256:")))
        .collect();
    for want in ["blobs/", "blobs/sha256/", "index.json", "manifest.json", "oci-layout"] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    for b in &blob_names {
        assert!(paths.contains(&b.as_str()), "{b} missing");
    }
    assert_eq!(paths.len(), 5 + blob_names.len(), "nothing else in the archive: {paths:?}");
    let file = |p: &str| &members.iter().find(|m| m.path == p).unwrap().data;
    let index: serde_json::Value = serde_json::from_slice(file("index.json")).unwrap();
    let entry = &index["manifests"][0];
    assert_eq!(entry["digest"], layout.manifest.digest.as_str());
    assert_eq!(entry["size"], file(&blob_names[0]).len());
    assert_eq!(entry["annotations"]["org.opencontainers.image.ref.name"], v.reference.as_str());
    assert_eq!(entry["annotations"]["io.containerd.image.name"], v.reference.as_str());
    let manifest: serde_json::Value = serde_json::from_slice(file(&blob_names[0])).unwrap();
    assert_eq!(manifest["config"]["size"], file(&blob_names[1]).len());
    for (i, l) in manifest["layers"].as_array().unwrap().iter().enumerate() {
        assert_eq!(l["size"], file(&blob_names[2 + i]).len());
        assert_eq!(l["mediaType"], oci::MEDIA_LAYER);
    }
    let docker: serde_json::Value = serde_json::from_slice(file("manifest.json")).unwrap();
    assert_eq!(docker[0]["Config"], blob_names[1].as_str());
    assert_eq!(docker[0]["RepoTags"][0], v.reference.as_str());
    assert!(members.iter().all(|m| m.mtime == 0 && m.uid == 0 && m.gid == 0 && m.uname == "root"));
}

#[test]
fn image_contents_and_run_config() {
    let bytes = archive(&fake(Kind::Mover, 0, b"x")).1;
    let v = oci::verify(&bytes).unwrap();
    let rc = &v.config.config;
    assert_eq!(rc.user, "65532:65532");
    assert_eq!(rc.entrypoint, ["/usr/local/bin/kopiur-mover"]);
    for e in [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "HOME=/home/nonroot",
        "USER=nonroot",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    ] {
        assert!(rc.env.iter().any(|x| x == e), "{e} missing from {:?}", rc.env);
    }
    assert_eq!(rc.labels["org.opencontainers.image.title"], "kopiur-mover");
    assert_eq!(rc.labels["org.opencontainers.image.version"], "0.1.0");
    assert_eq!(rc.labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(v.config.created, "1970-01-01T00:00:00Z");
    assert_eq!(v.layers.len(), 2);

    let all: Vec<&tar::Member> = v.layers.iter().flatten().collect();
    let get = |p: &str| *all.iter().find(|m| m.path == p).unwrap_or_else(|| panic!("{p} missing"));
    assert_eq!((get("tmp/").mode, get("tmp/").typeflag), (0o1777, b'5'));
    let home = get("home/nonroot/");
    assert_eq!((home.uid, home.gid, home.uname.as_str()), (65532, 65532, "nonroot"));
    let passwd = String::from_utf8(get("etc/passwd").data.clone()).unwrap();
    assert!(passwd.lines().any(|l| l.starts_with("root:x:0:0:")));
    assert!(passwd.lines().any(|l| l == "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"));
    assert!(String::from_utf8_lossy(&get("etc/group").data).contains("nonroot:x:65532:"));
    assert!(get("etc/ssl/certs/ca-certificates.crt").data.starts_with(b"-----BEGIN CERTIFICATE-----"));
    for bin in ["usr/local/bin/kopiur-mover", "usr/local/bin/kopia"] {
        assert_eq!((get(bin).mode, get(bin).uid), (0o755, 0), "{bin}");
    }
    assert!(all.iter().all(|m| m.mtime == 0));

    let controller = oci::verify(&archive(&fake(Kind::Controller, 0, b"x")).1).unwrap();
    let paths: Vec<&str> = controller.layers.iter().flatten().map(|m| m.path.as_str()).collect();
    assert!(paths.contains(&"usr/local/bin/kopiur-controller") && !paths.contains(&"usr/local/bin/kopia"));
}

#[test]
fn verify_rejects_a_tampered_blob() {
    let bytes = archive(&fake(Kind::Controller, 0, b"x")).1;
    let members = tar::read(&bytes).unwrap();
    let entries = |change: &dyn Fn(&str, &mut Vec<u8>)| {
        let es = members
            .iter()
            .filter(|m| m.typeflag == b'0')
            .map(|m| {
                let mut d = m.data.clone();
                change(&m.path, &mut d);
                tar::Entry::file(&m.path, 0o644, d)
            })
            .collect();
        tar::write(es, 0).unwrap()
    };
    assert!(oci::verify(&entries(&|_, _| {})).is_ok());
    let err = oci::verify(&entries(&|p, d| {
        if p.starts_with("blobs/sha256/") {
            let n = d.len();
            d[n - 1] ^= 1;
        }
    }))
    .unwrap_err();
    assert!(format!("{err:#}").contains("does not hash to its name"), "{err:#}");
}

#[test]
fn references_with_and_without_a_registry() {
    assert_eq!(reference(Kind::Controller, None, "0.1.0"), "kopiur-controller:0.1.0");
    assert_eq!(reference(Kind::Mover, Some("localhost/kopiur"), "dev"), "localhost/kopiur/kopiur-mover:dev");
    assert!(oci::check_reference("registry.example:5000/team/kopiur-mover:0.1.0").is_ok());
    assert!(oci::check_reference("kopiur-mover").is_err());
    assert!(oci::check_reference("registry.example:5000/kopiur-mover").is_err());
    assert!(oci::check_reference("Kopiur-Mover:1").is_err());
    assert!(oci::check_reference("kopiur-mover:a/b").is_err());
}

#[test]
fn arguments() {
    let a = |s: &[&str]| parse_args(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    assert_eq!(a(&[]).unwrap().arches, [Arch::Amd64]);
    assert_eq!(a(&["--arch", "amd64,arm64"]).unwrap().arches, [Arch::Amd64, Arch::Arm64]);
    assert_eq!(
        a(&["--registry", "registry.example/team/"]).unwrap().registry.as_deref(),
        Some("registry.example/team")
    );
    assert!(a(&["--registry", "https://registry.example"]).is_err());
    assert!(a(&["--arch", "riscv64"]).is_err());
    assert!(a(&["--arch"]).is_err());
    assert!(a(&["--push"]).is_err());
    assert!(!a(&[]).unwrap().node_images);
    assert!(a(&["--node-images", "--registry", "localhost", "--tag", "testenv"]).unwrap().node_images);
    let err = a(&["--node-images", "--arch", "arm64"]).err().unwrap().to_string();
    assert!(err.contains("amd64"), "{err}");
}

fn fake_node(kind: NodeKind, epoch: u64, busybox: &[u8]) -> oci::Image {
    node_image(kind, Some(NODE_REGISTRY), NODE_TAG, "0.1.0", epoch, [b"\x7fELF fake busybox ", busybox].concat())
}

/// Two builds of the node images from the same busybox give the same manifest digest and the
/// same archive bytes; another busybox or another epoch gives another image.
#[test]
fn node_images_are_reproducible() {
    for kind in NodeKind::ALL {
        let (a, bytes_a) = archive(&fake_node(kind, 0, b"1.35.0"));
        let (b, bytes_b) = archive(&fake_node(kind, 0, b"1.35.0"));
        assert_eq!(a.manifest.digest, b.manifest.digest, "{kind:?} manifest");
        assert_eq!((&a.config, &a.layers), (&b.config, &b.layers));
        assert_eq!(oci::sha256(&bytes_a), oci::sha256(&bytes_b), "{kind:?} archive bytes");
        let (c, _) = archive(&fake_node(kind, 0, b"1.36.1"));
        assert_ne!(a.manifest.digest, c.manifest.digest, "{kind:?}: another busybox is another image");
        let (d, _) = archive(&fake_node(kind, 1_700_000_000, b"1.35.0"));
        assert_ne!(a.manifest.digest, d.manifest.digest, "{kind:?}: SOURCE_DATE_EPOCH");
    }
}

/// The same with the build host's own busybox, when it is the static one the images use.
#[test]
fn node_images_from_the_host_busybox_are_reproducible() {
    let Ok(bb) = std::fs::read(BUSYBOX) else {
        eprintln!("skipped: no {BUSYBOX}");
        return;
    };
    if check_static_elf(&bb, Arch::Amd64).is_err() {
        eprintln!("skipped: {BUSYBOX} is not a static amd64 executable");
        return;
    }
    for kind in NodeKind::ALL {
        let build = || node_image(kind, Some(NODE_REGISTRY), NODE_TAG, "0.1.0", 0, bb.clone());
        let (a, bytes_a) = archive(&build());
        let (b, bytes_b) = archive(&build());
        assert_eq!(a.manifest.digest, b.manifest.digest, "{kind:?}");
        assert_eq!(bytes_a, bytes_b, "{kind:?}");
        let v = oci::verify(&bytes_a).unwrap();
        assert_eq!(v.layers[0].iter().find(|m| m.path == "bin/busybox").unwrap().data, bb);
    }
}

#[test]
fn node_image_contents_and_run_config() {
    let pause = oci::verify(&archive(&fake_node(NodeKind::Pause, 0, b"x")).1).unwrap();
    assert_eq!(pause.reference, "localhost/kopiur-testenv-pause:testenv");
    assert_eq!(pause.platform, Arch::Amd64.platform());
    let rc = &pause.config.config;
    assert_eq!(rc.entrypoint, ["/bin/busybox", "sleep", "infinity"]);
    assert_eq!(rc.user, "65535:65535");
    assert_eq!(rc.env, ["PATH=/bin"]);
    assert_eq!(rc.labels["org.opencontainers.image.title"], "kopiur-testenv-pause");
    assert!(rc.labels["org.opencontainers.image.description"].contains("test environment only"));
    let paths = |v: &oci::Verified| -> Vec<String> { v.layers.iter().flatten().map(|m| m.path.clone()).collect() };
    assert_eq!(paths(&pause), ["bin/", "bin/busybox"]);
    let bb = &pause.layers[0][1];
    assert_eq!((bb.mode, bb.uid, bb.gid, bb.typeflag), (0o755, 0, 0, b'0'));
    assert!(bb.data.starts_with(b"\x7fELF fake busybox"));

    let bytes = archive(&fake_node(NodeKind::Busybox, 0, b"x")).1;
    let shell = oci::verify(&bytes).unwrap();
    assert_eq!(shell.reference, "localhost/kopiur-testenv-busybox:testenv");
    let rc = &shell.config.config;
    assert_eq!(
        (rc.entrypoint.as_slice(), rc.user.as_str(), rc.working_dir.as_str()),
        (&["/bin/sh".to_string()][..], "0:0", "/")
    );
    assert_eq!(rc.env, ["PATH=/bin"]);
    assert_eq!(shell.layers.len(), 2);
    assert_eq!(shell.layers[0].len(), 2, "the first layer is the pause image's: /bin/busybox only");
    let all: Vec<&tar::Member> = shell.layers.iter().flatten().collect();
    let get = |p: &str| *all.iter().find(|m| m.path == p).unwrap_or_else(|| panic!("{p} missing"));
    for a in std::iter::once(&"sh").chain(BUSYBOX_APPLETS) {
        let m = get(&format!("bin/{a}"));
        assert_eq!((m.typeflag, m.linkname.as_str(), m.data.len()), (b'2', "busybox", 0), "bin/{a}");
    }
    assert_eq!((get("tmp/").mode, get("tmp/").typeflag), (0o1777, b'5'));
    for a in "mkdir chown chmod ls cat sha256sum stat ln sleep echo id find dd rm cp".split(' ') {
        assert!(BUSYBOX_APPLETS.contains(&a), "{a}: the end-to-end tests' workloads run it");
    }
    assert!(all.iter().all(|m| m.mtime == 0 && m.uid == 0));
}

#[test]
fn node_images_share_the_busybox_layer() {
    let (p, _) = archive(&fake_node(NodeKind::Pause, 0, b"x"));
    let (b, _) = archive(&fake_node(NodeKind::Busybox, 0, b"x"));
    assert_eq!(p.layers.len(), 1);
    assert_eq!(p.layers[0], b.layers[0], "containerd stores busybox once");
}

fn built(reference: &str, digest: &str) -> Built {
    Built {
        name: "kopiur-mover",
        reference: reference.into(),
        arch: Arch::Amd64,
        manifest_digest: digest.into(),
        archive: PathBuf::from(format!("/t/images/{}.oci.tar", reference.replace(['/', ':'], "-"))),
        node: false,
    }
}

#[test]
fn reproducibility_check_compares_every_digest() {
    let one = [built("localhost/a:testenv", "sha256:1"), built("localhost/b:testenv", "sha256:2")];
    assert!(check_reproducible(&one, &one).is_ok());
    let swapped = [one[1].clone(), one[0].clone()];
    assert!(check_reproducible(&one, &swapped).is_ok(), "order does not matter");
    let changed = [one[0].clone(), built("localhost/b:testenv", "sha256:3")];
    let err = check_reproducible(&one, &changed).unwrap_err().to_string();
    assert!(err.contains("localhost/b:testenv") && err.contains("sha256:2 then sha256:3"), "{err}");
    assert!(!err.contains("localhost/a:testenv"), "{err}");
    assert!(check_reproducible(&one, &one[..1]).is_err(), "an image missing from the second build");
    let dup = [one[0].clone(), one[0].clone()];
    assert!(check_reproducible(&dup, &one[..1]).is_err(), "an image written twice");
}

#[test]
fn node_images_json_lists_reference_archive_and_digest() {
    let mut pause = built("localhost/kopiur-testenv-pause:testenv", "sha256:9");
    pause.name = NodeKind::Pause.name();
    pause.node = true;
    let text = node_images_json(&[built("localhost/kopiur-mover:testenv", "sha256:1"), pause]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let images = v["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    assert_eq!(images[0]["reference"], "localhost/kopiur-mover:testenv");
    assert_eq!(images[0]["archive"], "/t/images/localhost-kopiur-mover-testenv.oci.tar");
    assert_eq!(images[0]["manifest_digest"], "sha256:1");
    assert_eq!(images[0]["platform"], "linux/amd64");
    assert_eq!(images[0]["test_only"], false);
    assert_eq!(images[1]["name"], "kopiur-testenv-pause");
    assert_eq!(images[1]["test_only"], true);
}

#[test]
fn toolchain_channel_names_the_image_build_dir() {
    assert_eq!(toolchain_channel("[toolchain]\nchannel = \"1.95.0\"\ncomponents = [\"clippy\"]\n").unwrap(), "1.95.0");
    assert_eq!(
        toolchain_channel("[toolchain]\nprofile = \"minimal\"\nchannel=\"stable\" # pinned\n").unwrap(),
        "stable"
    );
    assert!(toolchain_channel("[other]\nchannel = \"1.0\"\n").is_err());
    assert!(toolchain_channel("[toolchain]\nchannel = \"../x\"\n").is_err());
    let ours = toolchain_channel(&read_repo("rust-toolchain.toml")).unwrap();
    assert!(ours.chars().next().unwrap().is_ascii_digit(), "a pinned version: {ours}");
    let dir = image_build_dir().unwrap();
    if std::env::var_os("KOPIUR_IMAGE_BUILD_DIR").is_none() {
        assert_eq!(dir, testenv_cache().join(format!("image-build-{ours}")));
    }
    assert!(!dir.starts_with(repo_root()) || std::env::var_os("KOPIUR_IMAGE_BUILD_DIR").is_some(), "{}", dir.display());
}

#[test]
fn static_elf_check() {
    // A 64-bit little-endian ELF header with no program headers: static by construction.
    let mut h = vec![0u8; 128];
    h[..6].copy_from_slice(b"\x7fELF\x02\x01");
    h[18] = 0x3e;
    h[54] = 56;
    assert!(check_static_elf(&h, Arch::Amd64).is_ok());
    let err = check_static_elf(&h, Arch::Arm64).unwrap_err().to_string();
    assert!(err.contains("ELF machine"), "{err}");
    // One PT_INTERP program header at offset 64.
    h[32] = 64;
    h[56] = 1;
    h[64] = 3;
    let err = check_static_elf(&h, Arch::Amd64).unwrap_err().to_string();
    assert!(err.contains("dynamically linked"), "{err}");
    assert!(check_static_elf(b"#!/bin/sh\n", Arch::Amd64).is_err());
}

fn read_repo(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The Containerfiles describe the same image as `cargo xtask images`: entrypoint, user,
/// environment, labels and the rootfs files.
#[test]
fn containerfiles_match_the_xtask_images() {
    for kind in Kind::ALL {
        let short = kind.name().trim_start_matches("kopiur-");
        let rel = format!("deploy/images/{short}.Containerfile");
        let text = read_repo(&rel);
        // Join continuation lines, drop comments.
        let joined = text.replace("\\\n", " ");
        let lines: Vec<&str> = joined.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
        let instr = |name: &str| -> Vec<&str> {
            lines.iter().filter_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' '))).map(str::trim).collect()
        };
        let rc = run_config(kind, "0.1.0");
        let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
        assert_eq!(lines[last_from], "FROM scratch", "{rel}: final stage");
        let entry: Vec<String> = serde_json::from_str(instr("ENTRYPOINT").last().unwrap()).unwrap();
        assert_eq!(entry, rc.entrypoint, "{rel}");
        assert_eq!(instr("USER").last().copied(), Some(rc.user.as_str()), "{rel}");
        assert_eq!(instr("WORKDIR").last().copied(), Some(rc.working_dir.as_str()), "{rel}");
        let env: Vec<&str> = instr("ENV").iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(env, rc.env.iter().map(String::as_str).collect::<Vec<_>>(), "{rel}: ENV");
        let labels = instr("LABEL").join(" ");
        for (k, v) in &rc.labels {
            let want = if k.ends_with(".version") { "${VERSION}" } else { v.as_str() };
            assert!(labels.contains(&format!("{k}=\"{want}\"")), "{rel}: LABEL {k}={want:?} missing");
        }
        let ships_kopia = text.contains("COPY --from=kopia /kopia /usr/local/bin/kopia");
        assert_eq!(ships_kopia, kind.has_kopia(), "{rel}: kopia");
        assert!(text.contains(&format!("deploy/images/build-rust.sh {} /out", kind.name())), "{rel}");
        if kind.has_kopia() {
            assert!(text.contains("CGO_ENABLED=0"), "{rel}: kopia must be static");
        }
    }
    let script = read_repo("deploy/images/build-rust.sh");
    for f in ["passwd", "group", "nsswitch.conf"] {
        assert!(script.contains(&format!("deploy/images/rootfs/etc/{f}")), "build-rust.sh installs etc/{f}");
    }
    for want in ["-m 1777 \"$out/tmp\"", "-o 65532 -g 65532 \"$out/home/nonroot\"", "--profile image", CA_BUNDLE] {
        assert!(script.contains(want), "build-rust.sh: {want}");
    }
}

fn workflow() -> serde_norway::Value {
    serde_norway::from_str(&read_repo(".github/workflows/release.yml")).unwrap()
}

fn steps(job: &serde_norway::Value) -> Vec<&serde_norway::Value> {
    job["steps"].as_sequence().expect("steps").iter().collect()
}

/// The release workflow builds both Containerfiles for linux/amd64 and linux/arm64, makes an
/// SBOM, signs with cosign and pins both digests in the packaged chart; the registry comes
/// from a repository variable, never from the file.
#[test]
fn release_workflow_builds_signs_and_pins() {
    let wf = workflow();
    let jobs = wf["jobs"].as_mapping().expect("jobs");
    let images = &wf["jobs"]["images"];
    let builds: Vec<&serde_norway::Value> = steps(images)
        .into_iter()
        .filter(|s| s["uses"].as_str().is_some_and(|u| u.starts_with("docker/build-push-action@")))
        .collect();
    let mut files: Vec<&str> = builds.iter().map(|s| s["with"]["file"].as_str().unwrap()).collect();
    files.sort_unstable();
    assert_eq!(files, ["deploy/images/controller.Containerfile", "deploy/images/mover.Containerfile"]);
    for b in &builds {
        assert_eq!(b["with"]["platforms"].as_str(), Some("linux/amd64,linux/arm64"));
        assert_eq!(b["with"]["push"].as_bool(), Some(true));
        let tags = b["with"]["tags"].as_str().unwrap();
        assert!(tags.starts_with("${{ env.REGISTRY }}/kopiur-"), "{tags}");
        let file = b["with"]["file"].as_str().unwrap();
        assert!(repo_root().join(file).is_file(), "{file} exists");
        let id = b["id"].as_str().unwrap();
        assert!(
            images["outputs"][format!("{id}-digest").as_str()]
                .as_str()
                .unwrap()
                .contains(&format!("steps.{id}.outputs.digest")),
            "the job exports the {id} digest"
        );
    }
    assert_eq!(wf["env"]["REGISTRY"].as_str(), Some("${{ vars.REGISTRY }}"));
    let run_text = |job: &serde_norway::Value| -> String {
        steps(job).iter().filter_map(|s| s["run"].as_str()).collect::<Vec<_>>().join("\n")
    };
    let uses = |job: &serde_norway::Value| -> Vec<String> {
        steps(job).iter().filter_map(|s| s["uses"].as_str()).map(String::from).collect()
    };
    let img_run = run_text(images);
    assert!(uses(images).iter().any(|u| u.starts_with("sigstore/cosign-installer@")));
    assert!(img_run.contains("syft ") && img_run.contains("spdx-json"), "SBOM per image");
    assert!(img_run.contains("cosign sign --yes") && img_run.contains("cosign attest --yes --type spdxjson"));

    let chart = &wf["jobs"]["chart"];
    assert_eq!(chart["needs"].as_str(), Some("images"));
    let chart_run = run_text(chart);
    for want in [
        ".image.digest = strenv(CONTROLLER_DIGEST)",
        ".mover.image.digest = strenv(MOVER_DIGEST)",
        "helm package",
        "helm push",
        "cosign sign --yes",
    ] {
        assert!(chart_run.contains(want), "chart job: {want}");
    }
    assert_eq!(chart["env"]["CONTROLLER_DIGEST"].as_str(), Some("${{ needs.images.outputs.controller-digest }}"));
    assert_eq!(chart["env"]["MOVER_DIGEST"].as_str(), Some("${{ needs.images.outputs.mover-digest }}"));
    let helm = steps(chart)
        .into_iter()
        .find(|s| s["uses"].as_str().is_some_and(|u| u.starts_with("azure/setup-helm@")))
        .unwrap();
    assert_eq!(helm["with"]["version"].as_str(), Some(versions_env("HELM_VERSION").unwrap().as_str()));
    assert_eq!(jobs.len(), 2);

    // No registry host is written into the workflow: every registry comes from vars.REGISTRY.
    let text = read_repo(".github/workflows/release.yml");
    for s in text.split(|c: char| c.is_whitespace() || "\"'=,()".contains(c)) {
        if let Some((host, _)) = s.split_once('/') {
            assert!(!host.contains('.') || host.contains('$'), "host-like name {s:?} in release.yml");
        }
    }
}
