#!/usr/bin/env bash
# Measures "make test" from a cold build cache on a clean clone, the way CI
# runs it on a fresh machine: the Go build cache and the real-node tools
# (containerd, the kubelet) start empty. Module downloads and Debian
# packages are not included (the module cache and the system are reused).
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/src"
cd "$work/src"
export GOCACHE="$work/cache"
export STRATA_REALNODE_CACHE="$work/realnode"
start=$(date +%s)
make test
echo "cold make test: $(( $(date +%s) - start ))s"
