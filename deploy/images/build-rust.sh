#!/usr/bin/env bash
# Build stage of deploy/images/*.Containerfile: one static musl binary plus the image's base
# files, laid out under OUT (the final stage copies OUT onto scratch). The same contents as
# `cargo xtask images` (crates/xtask/src/images.rs), which builds without a container engine.
#   deploy/images/build-rust.sh BINARY OUT      (TARGETARCH=amd64|arm64 from the builder)
set -euo pipefail
bin="$1"; out="$2"
case "${TARGETARCH:?TARGETARCH is set by the image builder}" in
  amd64) target=x86_64-unknown-linux-musl; export CC_x86_64_unknown_linux_musl=musl-gcc ;;
  arm64) target=aarch64-unknown-linux-musl
         export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
         export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc ;;
  *) echo "unsupported TARGETARCH=$TARGETARCH (amd64, arm64)" >&2; exit 2 ;;
esac
# rust-toolchain.toml pins the toolchain; the musl target is added here.
rustup target add "$target"
cargo build --locked --profile image --target "$target" -p "$bin" --bin "$bin"

install -d -m 0755 "$out/usr/local/bin" "$out/etc/ssl/certs" "$out/home"
install -m 0755 "target/$target/image/$bin" "$out/usr/local/bin/$bin"
install -m 0644 deploy/images/rootfs/etc/passwd deploy/images/rootfs/etc/group deploy/images/rootfs/etc/nsswitch.conf "$out/etc/"
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$out/etc/ssl/certs/ca-certificates.crt"
install -d -m 1777 "$out/tmp"
install -d -m 0700 "$out/root"
install -d -m 0755 -o 65532 -g 65532 "$out/home/nonroot"
