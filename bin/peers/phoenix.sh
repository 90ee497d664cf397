#!/usr/bin/env bash
# Real peer: Arize Phoenix (arize-phoenix on PyPI), an OTLP trace receiver written by others, for
# tests/peer/test_phoenix_traces.py. Installed into its own venv, $AGENTMILL_PEERS_DIR/phoenix
# (a few hundred MB; pip resolves it in minutes the first time). A no-op when already installed.
set -euo pipefail
PEERS=${AGENTMILL_PEERS_DIR:-$HOME/.cache/agentmill-peers}
VENV="$PEERS/phoenix"
STAMP="$VENV/.agentmill-installed"
PHOENIX_VERSION=${ARIZE_PHOENIX_VERSION:-20.26.1}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PHOENIX_VERSION" ]; then
  exit 0
fi
mkdir -p "$PEERS"
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
echo "bin/peers/phoenix.sh: installing arize-phoenix $PHOENIX_VERSION (minutes)" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "arize-phoenix==$PHOENIX_VERSION"
echo "$PHOENIX_VERSION" > "$STAMP"
