#!/usr/bin/env bash
# Browser test of the page `tra serve` serves at `/`: Debian's chromium driven by
# playwright-core (node:test). Installs what it needs: the tra binary (cargo
# build), chromium (apt-get, Debian's package) and playwright-core (npm ci;
# Playwright never downloads a browser). Leaves screenshots of the page in web/test/artifacts/ (git-ignored).
#   TRA_BIN=path/to/tra   use that binary instead of building target/debug/tra
set -euo pipefail
cd "$(dirname "$0")/.."

export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

if [ -z "${TRA_BIN:-}" ]; then
  # cargo rebuilds only when the sources (the embedded page included) changed
  cargo build -p tra-api --bin tra
  export TRA_BIN="$PWD/target/debug/tra"
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "web-test: installing Debian's chromium" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi

if ! command -v node >/dev/null 2>&1; then
  echo "web-test: node (>= 18) is needed to run the browser test" >&2
  exit 1
fi

if [ ! -d web/node_modules/playwright-core ]; then
  (cd web && npm ci --no-audit --no-fund)
fi

node --test web/test/*.test.mjs
