#!/usr/bin/env bash
# Installs LiteLLM's proxy (PyPI litellm[proxy]) into $AGENTMILL_PEERS_DIR/litellm: the Messages API
# peer (/v1/messages) that tests/peer/test_anthropic_litellm.py puts in front of the llama.cpp peer.
# A no-op when already installed.
set -euo pipefail
PEERS=${AGENTMILL_PEERS_DIR:-$HOME/.cache/agentmill-peers}
VENV="$PEERS/litellm"
STAMP="$VENV/.agentmill-installed"
LITELLM_VERSION=${LITELLM_VERSION:-1.110.2}
BUILD="litellm[proxy]==$LITELLM_VERSION"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$BUILD" ]; then
  exit 0
fi
mkdir -p "$PEERS"
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
echo "bin/peers/litellm.sh: installing $BUILD" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$BUILD"
echo "$BUILD" > "$STAMP"
