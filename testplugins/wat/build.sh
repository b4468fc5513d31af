#!/usr/bin/env bash
# Rebuilds every .wasm in this directory from the .wat beside it. The .wasm
# files are committed; run this (or `make wat-plugins`) after editing a .wat.
# Needs wat2wasm from wabt (`make tools` installs it).
set -euo pipefail
cd "$(dirname "$0")"
for wat in *.wat; do
  wat2wasm "$wat" -o "${wat%.wat}.wasm"
done
