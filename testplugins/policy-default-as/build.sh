#!/usr/bin/env bash
# Rebuild policy-default-as.wasm from source with the pinned npm packages
# (package-lock.json). The output is byte-reproducible; make plugins runs
# this and make check fails when the committed .wasm differs.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
sha256sum policy-default-as.wasm
