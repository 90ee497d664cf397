#!/usr/bin/env bash
# Real peer: Debian's Chromium and its WebDriver, for the web console's browser test
# (tests/integration/test_console_browser.py, marked peer). Debian packages install system-wide, so
# this needs root and apt-get; it records where they are in $AGENTMILL_PEERS_DIR/chromium.env.
# A no-op when both binaries are already there.
set -euo pipefail
dir=${AGENTMILL_PEERS_DIR:-$HOME/.cache/agentmill-peers}
mkdir -p "$dir"
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "bin/peers/chromium.sh: chromium and chromium-driver are missing and apt-get needs root; skipping" >&2
    exit 0
  fi
  echo "bin/peers/chromium.sh: installing chromium and chromium-driver (Debian packages)" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
fi
printf 'CHROMIUM=%s\nCHROMEDRIVER=%s\n' "$(command -v chromium)" "$(command -v chromedriver)" >"$dir/chromium.env"
