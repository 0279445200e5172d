#!/usr/bin/env bash
# Measures "make test" from a cold build cache on a clean clone, the way CI
# runs it. Module downloads are not included (the module cache is reused).
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/src"
cd "$work/src"
export GOCACHE="$work/cache"
start=$(date +%s)
make test
echo "cold make test: $(( $(date +%s) - start ))s"
