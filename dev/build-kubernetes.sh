#!/usr/bin/env bash
# Builds the proving ground's Kubernetes, etcd, kwok, kustomize (and crictl) from the Go module proxy
# into a cache directory keyed by version. A second run with the same versions builds nothing.
#
# Why a throwaway module: k8s.io/kubernetes replaces its k8s.io/* staging modules with local paths,
# so `go install k8s.io/kubernetes/cmd/...@vX` is refused. We require k8s.io/kubernetes at the pinned
# release and replace each staging module with its published v0.Y.Z twin instead.
set -euo pipefail

# The control planes of the ground's matrix (dev/proving_ground/layout.py KUBERNETES_VERSIONS) and
# the real node's kubelet (KUBELET_VERSION, the oldest of them): each release in its own directory.
KUBERNETES_VERSIONS=${KUBERNETES_VERSIONS:-${KUBERNETES_VERSION:-v1.37.2 v1.34.4}}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
KUSTOMIZE_VERSION=${KUSTOMIZE_VERSION:-v5.7.1}
CRICTL_VERSION=${CRICTL_VERSION:-v1.34.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
CACHE_DIR=${SKB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slurm-k8s-bridge}

kwok_out="$CACHE_DIR/kwok-$KWOK_VERSION"
kustomize_out="$CACHE_DIR/kustomize-$KUSTOMIZE_VERSION"
crictl_out="$CACHE_DIR/crictl-$CRICTL_VERSION"
coredns_out="$CACHE_DIR/coredns-$COREDNS_VERSION"
k8s_commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

log() { printf '[build-kubernetes %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

have_kubernetes() { # version
  local f out="$CACHE_DIR/kubernetes-$1"
  for f in "$out"/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl,etcd}; do
    [ -x "$f" ] || return 1
  done
}

have_all() {
  local f v
  for v in $KUBERNETES_VERSIONS; do have_kubernetes "$v" || return 1; done
  for f in "$kwok_out/kwok" "$kustomize_out/kustomize" "$crictl_out/crictl" \
           "$coredns_out/coredns"; do
    [ -x "$f" ] || return 1
  done
}

if have_all; then
  log "cached: Kubernetes $KUBERNETES_VERSIONS under $CACHE_DIR (nothing to build)"
  exit 0
fi
mkdir -p "$CACHE_DIR"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

build_kubernetes() { # version
  local version=$1 out="$CACHE_DIR/kubernetes-$1"
  have_kubernetes "$version" && return 0
  local work="$CACHE_DIR/src/kubernetes-$version"
  mkdir -p "$work"
  local minor=${version#v1.}; minor=${minor%%.*}
  local staging_version="v0.${version#v1.}"
  log "resolving k8s.io/kubernetes $version (staging modules at $staging_version)"
  local k8s_dir
  k8s_dir=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$version" \
            | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  {
    echo "module slurm-k8s-bridge.local/kubernetes-build"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    echo "replace ("
    sed -n 's#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$k8s_dir/go.mod"
    echo ")"
  } > "$work/go.mod"
  cat > "$work/tools.go" <<'GO'
//go:build tools

// Package tools pins the commands we build so that `go mod tidy` keeps their dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	_ "k8s.io/kubernetes/cmd/kube-proxy/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
GO
  log "go mod tidy (downloads modules on a cold machine)"
  (cd "$work" && go mod tidy)
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$version"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  mkdir -p "$out.partial"
  local pkgs=() c
  for c in "${k8s_commands[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  log "go build Kubernetes $version: ${k8s_commands[*]} etcd (cold: 8-15 min on 2 cores)"
  (cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$out.partial/" "${pkgs[@]}")
  (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$out.partial/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$out" && mv "$out.partial" "$out"
  log "built $out"
}
for version in $KUBERNETES_VERSIONS; do build_kubernetes "$version"; done

go_install() { # name version-dir module@version
  local name=$1 dir=$2 module=$3
  [ -x "$dir/$name" ] && return 0
  log "go install $module"
  mkdir -p "$dir.partial"
  GOBIN="$dir.partial" GOFLAGS= go install -trimpath -ldflags "-s -w" "$module"
  rm -rf "$dir" && mv "$dir.partial" "$dir"
}
go_install kwok "$kwok_out" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
go_install kustomize "$kustomize_out" "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
go_install crictl "$crictl_out" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
# Cluster DNS: pods resolve each other's node names through the bridge's headless Service.
go_install coredns "$coredns_out" "github.com/coredns/coredns@$COREDNS_VERSION"
log "all binaries present under $CACHE_DIR"
