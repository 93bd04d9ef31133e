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
# Usage: sdk/install-toolchains.sh [--python] [--js] [--c] [--rust]  (default: all)
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1
WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_VERSION=1.263.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

want_py=0 want_js=0 want_c=0 want_rust=0
if [ $# -eq 0 ]; then want_py=1 want_js=1 want_c=1 want_rust=1; fi
for a in "$@"; do
  case "$a" in
    --python) want_py=1 ;;
    --js) want_js=1 ;;
    --c) want_c=1 ;;
    --rust) want_rust=1 ;;
    *) echo "usage: $0 [--python] [--js] [--c] [--rust]" >&2; exit 2 ;;
  esac
done

if [ "$want_rust" = 1 ] && command -v rustup >/dev/null 2>&1; then
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2 >/dev/null
  fi
fi

if [ "$want_py" = 1 ]; then
  have="$(componentize-py --version 2>/dev/null | awk '{print $2}' || true)"
  if [ "$have" != "$COMPONENTIZE_PY_VERSION" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "componentize-py==${COMPONENTIZE_PY_VERSION}"
  fi
  componentize-py --version >/dev/null
fi

if [ "$want_js" = 1 ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "install-toolchains: npm not found (Node.js 20+ is needed for JavaScript plugins)" >&2
    exit 1
  fi
  stamp="$here/js/node_modules/.wharf-lock.sha256"
  sum="$(sha256sum "$here/js/package-lock.json" | awk '{print $1}')"
  if [ ! -x "$here/js/node_modules/.bin/componentize-js" ] || [ ! -x "$here/js/node_modules/.bin/esbuild" ] \
    || [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    (cd "$here/js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$sum" > "$stamp"
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
  missing=()
  command -v clang >/dev/null 2>&1 || missing+=(clang)
  command -v wasm-ld >/dev/null 2>&1 || missing+=(lld)
  [ -f /usr/lib/wasm32-wasi/libc.a ] || [ -f /usr/share/wasi-sysroot/lib/wasm32-wasi/libc.a ] || missing+=(wasi-libc)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-toolchains: C components also need Debian's ${missing[*]} (apt-get install clang lld wasi-libc)" >&2
    exit 1
  fi
fi
