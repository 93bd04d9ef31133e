#!/usr/bin/env bash
# Installs what building Python, JavaScript and C plugins needs, for CI and
# developers: componentize-py (PyPI), the pinned JS toolchain of sdk/js
# (componentize-js + esbuild, from sdk/js/package-lock.json), and for C
# `wit-bindgen` (crate wit-bindgen-cli, C generator only) and `wasm-tools`
# (component subcommands) from crates.io. C also needs Debian's clang, lld
# and wasi-libc (apt; checked, not installed, here). Rust plugins need only
# `rustup target add wasm32-wasip2`.
#
# Idempotent and quiet: does nothing when the pinned versions are present.
# Usage: sdk/install-toolchains.sh [--python] [--js] [--c] [--rust]
#
# Named languages are required: anything missing for one fails the script.
# Without arguments it installs what this machine can build and skips, with a
# note naming what is missing and the flag to run again, a language whose
# prerequisites are absent (pip, npm, cargo, or for C Debian's clang, lld and
# wasi-libc): exit 0 unless an install itself fails. CI names every flag.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1
WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_VERSION=1.263.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

want_py=0 want_js=0 want_c=0 want_rust=0
# 1 when languages were named (each one required), 0 for the default set.
required=1
if [ $# -eq 0 ]; then want_py=1 want_js=1 want_c=1 want_rust=1 required=0; fi
for a in "$@"; do
  case "$a" in
    --python) want_py=1 ;;
    --js) want_js=1 ;;
    --c) want_c=1 ;;
    --rust) want_rust=1 ;;
    *) echo "usage: $0 [--python] [--js] [--c] [--rust]" >&2; exit 2 ;;
  esac
done

skipped=()
# missing LANG FLAG WHAT: a prerequisite of LANG is absent. Fatal when LANG
# was asked for; in the default set LANG is skipped with a note.
missing() {
  if [ "$required" = 1 ]; then
    echo "install-toolchains: $3" >&2
    exit 1
  fi
  echo "install-toolchains: skipping $1 plugins: $3; once that is there, run \`sdk/install-toolchains.sh $2\`" >&2
  skipped+=("$1 ($2)")
}

if [ "$want_rust" = 1 ] && command -v rustup >/dev/null 2>&1; then
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2 >/dev/null
  fi
fi

if [ "$want_py" = 1 ]; then
  have="$(componentize-py --version 2>/dev/null | awk '{print $2}' || true)"
  if [ "$have" = "$COMPONENTIZE_PY_VERSION" ]; then
    :
  elif ! python3 -m pip --version >/dev/null 2>&1; then
    missing Python --python "python3 with pip not found (needed to install componentize-py ${COMPONENTIZE_PY_VERSION})"
  else
    python3 -m pip install --quiet --disable-pip-version-check "componentize-py==${COMPONENTIZE_PY_VERSION}"
    componentize-py --version >/dev/null
  fi
fi

if [ "$want_js" = 1 ] && ! command -v npm >/dev/null 2>&1 \
  && { [ ! -x "$here/js/node_modules/.bin/componentize-js" ] || [ ! -x "$here/js/node_modules/.bin/esbuild" ]; }; then
  missing JavaScript --js "npm not found (Node.js 20+ is needed for JavaScript plugins)"
  want_js=0
fi
if [ "$want_js" = 1 ]; then
  stamp="$here/js/node_modules/.wharf-lock.sha256"
  sum="$(sha256sum "$here/js/package-lock.json" | awk '{print $1}')"
  if [ ! -x "$here/js/node_modules/.bin/componentize-js" ] || [ ! -x "$here/js/node_modules/.bin/esbuild" ] \
    || [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    (cd "$here/js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$sum" > "$stamp"
  fi
fi

if [ "$want_c" = 1 ]; then
  # The system part first: without it wit-bindgen and wasm-tools are of no use.
  need=()
  command -v clang >/dev/null 2>&1 || need+=(clang)
  command -v wasm-ld >/dev/null 2>&1 || need+=(lld)
  [ -f /usr/lib/wasm32-wasi/libc.a ] || [ -f /usr/share/wasi-sysroot/lib/wasm32-wasi/libc.a ] || need+=(wasi-libc)
  if [ ${#need[@]} -gt 0 ]; then
    missing C --c "C components need Debian's ${need[*]} (apt-get install clang lld wasi-libc)"
    want_c=0
  elif ! command -v cargo >/dev/null 2>&1; then
    missing C --c "cargo not found (needed to install wit-bindgen-cli and wasm-tools)"
    want_c=0
  fi
fi
if [ "$want_c" = 1 ]; then
  # `TOOL --version` prints "TOOL X.Y.Z (…)"; reinstall unless it is the pin.
  version_of() { "$1" --version 2>/dev/null | awk '{print $2}' || true; }
  if [ "$(version_of wit-bindgen)" != "$WIT_BINDGEN_VERSION" ]; then
    cargo install --quiet --locked --force "wit-bindgen-cli@${WIT_BINDGEN_VERSION}" \
      --no-default-features --features c
  fi
  if [ "$(version_of wasm-tools)" != "$WASM_TOOLS_VERSION" ]; then
    cargo install --quiet --locked --force "wasm-tools@${WASM_TOOLS_VERSION}" \
      --no-default-features --features component,validate,print,metadata
  fi
fi

if [ ${#skipped[@]} -gt 0 ]; then
  echo "install-toolchains: done; skipped: ${skipped[*]}" >&2
fi
