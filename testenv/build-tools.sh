#!/usr/bin/env bash
# Builds (once) every external tool the test environment needs into a versioned cache
# outside the repository, and reuses it on later runs. Idempotent; safe to re-run.
#   testenv/build-tools.sh [etcd] [k8s] [kopia] [garage] [helm] [csi]   (default: all but helm)
# Cache: ${KOPIUR_TESTENV_CACHE:-$HOME/.cache/kopiur-testenv}
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck disable=SC1091
source "$HERE/versions.env"
CACHE="${KOPIUR_TESTENV_CACHE:-$HOME/.cache/kopiur-testenv}"
mkdir -p "$CACHE/go/mod" "$CACHE/go/build"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Prints a heartbeat every 30 s while a long build runs, so a cold build shows progress.
with_heartbeat() {
  local what="$1"; shift
  local start; start=$(date +%s)
  ( while sleep 30; do log "$what: still building ($(( $(date +%s) - start ))s)"; done ) &
  local hb=$!
  local rc=0
  "$@" || rc=$?
  kill "$hb" 2>/dev/null || true; wait "$hb" 2>/dev/null || true
  if [ "$rc" -eq 0 ]; then log "$what: done in $(( $(date +%s) - start ))s"; else log "$what: FAILED (exit $rc)"; fi
  return "$rc"
}

# go.mod, go.sum, then every .go file in name order (main.go alone gives the same hash as before).
wrapper_hash() { cat "$1/go.mod" "$1/go.sum" "$1"/*.go | sha256sum | cut -c1-12; }

# install_dir NAME -> prints the final directory; builds go into NAME.tmp.$$ then mv.
finish() { # tmp final
  rm -rf "$2"; mv "$1" "$2"
}

build_etcd() {
  local dir="$CACHE/etcd-$ETCD_VERSION-$(wrapper_hash "$HERE/go/etcd")"
  if [ -x "$dir/bin/etcd" ]; then log "etcd $ETCD_VERSION: cached ($dir)"; return; fi
  local tmp="$dir.tmp.$$"; mkdir -p "$tmp/bin"
  log "etcd $ETCD_VERSION: building (1-2 min cold)"
  with_heartbeat etcd bash -c "cd '$HERE/go/etcd' && go build -p 2 -trimpath -ldflags '-s -w' -o '$tmp/bin/etcd' ."
  "$tmp/bin/etcd" --version >/dev/null
  finish "$tmp" "$dir"
}

# One multi-call binary; each command is a symlink to it.
k8s_links() {
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -e "$1/$c" ] || ln -s k8sbin "$1/$c"
  done
}

build_k8s() {
  local dir="$CACHE/k8s-$K8S_VERSION-$(wrapper_hash "$HERE/go/k8s")"
  if [ -x "$dir/bin/k8sbin" ]; then k8s_links "$dir/bin"; log "k8s $K8S_VERSION: cached ($dir)"; return; fi
  local tmp="$dir.tmp.$$"; mkdir -p "$tmp/bin"
  local minor; minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  local V=k8s.io/component-base/version
  log "k8s $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl): building (12-25 min cold)"
  with_heartbeat k8s bash -c "cd '$HERE/go/k8s' && go build -p 2 -trimpath -o '$tmp/bin/k8sbin' \
    -ldflags '-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean -X $V.buildDate=2026-01-01T00:00:00Z' ."
  k8s_links "$tmp/bin"
  "$tmp/bin/kube-apiserver" --version >/dev/null
  finish "$tmp" "$dir"
}

build_kopia() {
  # Built through a wrapper module with a `tool` directive: `go install pkg@version` would
  # also look up the module's version list (for deprecations), which the proxy may refuse.
  local w="$HERE/go/kopia"
  local dir="$CACHE/kopia-$KOPIA_VERSION-$(cat "$w/go.mod" "$w/go.sum" | sha256sum | cut -c1-12)"
  if [ -x "$dir/bin/kopia" ]; then log "kopia $KOPIA_VERSION: cached ($dir)"; return; fi
  local tmp="$dir.tmp.$$"; mkdir -p "$tmp/bin"
  log "kopia $KOPIA_VERSION: building (3-6 min cold)"
  with_heartbeat kopia bash -c "cd '$w' && go build -p 2 -trimpath -tags nohtmlui -ldflags '-s -w' -o '$tmp/bin/kopia' github.com/kopia/kopia"
  "$tmp/bin/kopia" --version >/dev/null
  finish "$tmp" "$dir"
}

build_garage() {
  local dir="$CACHE/garage-v$GARAGE_VERSION"
  if [ -x "$dir/bin/garage" ]; then log "garage $GARAGE_VERSION: cached ($dir)"; return; fi
  local tmp="$dir.tmp.$$"; mkdir -p "$tmp"
  log "garage $GARAGE_VERSION: building with cargo install (6-9 min cold)"
  # opt-level 1: the tests move kilobytes to megabytes through Garage, so its speed does not
  # matter, and the build is the longest step of a cold run.
  with_heartbeat garage env CARGO_TARGET_DIR="$CACHE/garage-target" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
    cargo install garage --version "$GARAGE_VERSION" --locked --root "$tmp" -j 2 --quiet
  rm -rf "$CACHE/garage-target"
  "$tmp/bin/garage" --version >/dev/null 2>&1 || "$tmp/bin/garage" --help >/dev/null
  finish "$tmp" "$dir"
}

build_helm() {
  # Same wrapper-module approach as kopia: `go install helm.sh/...@version` is refused by
  # the proxy's version-list lookup, a `tool` directive in testenv/go/helm is not.
  local w="$HERE/go/helm"
  local dir="$CACHE/helm-$HELM_VERSION-$(cat "$w/go.mod" "$w/go.sum" | sha256sum | cut -c1-12)"
  if [ -x "$dir/bin/helm" ]; then log "helm $HELM_VERSION: cached ($dir)"; return; fi
  local tmp="$dir.tmp.$$"; mkdir -p "$tmp/bin"
  log "helm $HELM_VERSION: building (2-4 min cold)"
  local V=helm.sh/helm/v3/internal/version
  with_heartbeat helm bash -c "cd '$w' && go build -p 2 -trimpath -ldflags '-s -w -X $V.version=$HELM_VERSION' -o '$tmp/bin/helm' helm.sh/helm/v3/cmd/helm"
  "$tmp/bin/helm" version >/dev/null
  finish "$tmp" "$dir"
}

# Copies a module of the Go module proxy into a writable directory (prints it): the CSI
# sidecars' go.mod files carry replace directives, so `go install pkg@version` refuses them.
module_src() { # module@version dest
  local d
  d=$(cd / && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -n "$d" ] || { log "go mod download $1 printed no Dir"; return 1; }
  rm -rf "$2"; mkdir -p "$(dirname "$2")"; cp -r "$d" "$2"; chmod -R u+w "$2"
}

# The CSI stack of the real node (docs/testenv.md, "CSI stack"): our own driver
# (testenv/go/csi-driver) and the upstream sidecars csi-provisioner, csi-snapshotter and
# snapshot-controller, plus the snapshot CRDs of the snapshotter's client module.
build_csi() {
  local w="$HERE/go/csi-driver"
  local dir="$CACHE/csi-$CSI_PROVISIONER_VERSION-$CSI_SNAPSHOTTER_VERSION-$(wrapper_hash "$w")"
  local b
  local ok=1
  for b in kopiur-csi-hostpath csi-provisioner csi-snapshotter snapshot-controller; do [ -x "$dir/bin/$b" ] || ok=0; done
  if [ "$ok" = 1 ]; then log "csi (provisioner $CSI_PROVISIONER_VERSION, snapshotter $CSI_SNAPSHOTTER_VERSION): cached ($dir)"; return; fi
  local tmp="$dir.tmp.$$"; rm -rf "$tmp"; mkdir -p "$tmp/bin" "$tmp/crds"
  log "csi: building kopiur-csi-hostpath, csi-provisioner $CSI_PROVISIONER_VERSION, csi-snapshotter and snapshot-controller $CSI_SNAPSHOTTER_VERSION (5-15 min cold)"
  with_heartbeat csi-driver bash -c "cd '$w' && go build -p 2 -trimpath -ldflags '-s -w' -o '$tmp/bin/kopiur-csi-hostpath' ."
  local src="$tmp/src"
  module_src "github.com/kubernetes-csi/external-snapshotter/v8@$CSI_SNAPSHOTTER_VERSION" "$src/snapshotter"
  # go.mod says `replace .../client/v8 => ./client`, which the module zip does not contain.
  module_src "github.com/kubernetes-csi/external-snapshotter/client/v8@$CSI_SNAPSHOTTER_VERSION" "$src/snapshotter/client"
  with_heartbeat csi-snapshotter bash -c "cd '$src/snapshotter' && go build -mod=mod -p 2 -trimpath -ldflags '-s -w' -o '$tmp/bin/' ./cmd/snapshot-controller ./cmd/csi-snapshotter"
  cp "$src"/snapshotter/client/config/crd/snapshot.storage.k8s.io_*.yaml "$tmp/crds/"
  module_src "github.com/kubernetes-csi/external-provisioner/v5@$CSI_PROVISIONER_VERSION" "$src/provisioner"
  with_heartbeat csi-provisioner bash -c "cd '$src/provisioner' && go build -mod=mod -p 2 -trimpath -ldflags '-s -w' -o '$tmp/bin/' ./cmd/csi-provisioner"
  rm -rf "$src"
  for b in csi-provisioner csi-snapshotter snapshot-controller; do "$tmp/bin/$b" --help >/dev/null 2>&1 || [ $? -le 2 ]; done
  [ "$(ls "$tmp/crds" | wc -l)" = 3 ] || { log "csi: expected 3 snapshot CRDs, got: $(ls "$tmp/crds")"; return 1; }
  finish "$tmp" "$dir"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(etcd k8s kopia garage csi)
for t in "${targets[@]}"; do
  case "$t" in
    etcd) build_etcd ;; k8s) build_k8s ;; kopia) build_kopia ;; garage) build_garage ;; helm) build_helm ;; csi) build_csi ;;
    *) log "unknown tool $t (expected etcd k8s kopia garage helm csi)"; exit 2 ;;
  esac
done
log "all requested tools ready in $CACHE"
