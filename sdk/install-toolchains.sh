#!/usr/bin/env bash
# Installs what building Python and JavaScript plugins needs, for CI and
# developers: componentize-py (PyPI) and the pinned JS toolchain of sdk/js
# (componentize-js + esbuild, from sdk/js/package-lock.json). Rust plugins
# need only `rustup target add wasm32-wasip2`.
#
# Idempotent and quiet: does nothing when the pinned versions are present.
# Usage: sdk/install-toolchains.sh [--python] [--js] [--rust]  (default: all)
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

want_py=0 want_js=0 want_rust=0
if [ $# -eq 0 ]; then want_py=1 want_js=1 want_rust=1; fi
for a in "$@"; do
  case "$a" in
    --python) want_py=1 ;;
    --js) want_js=1 ;;
    --rust) want_rust=1 ;;
    *) echo "usage: $0 [--python] [--js] [--rust]" >&2; exit 2 ;;
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
