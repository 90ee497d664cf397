#!/usr/bin/env bash
# Installs LiteLLM's proxy (PyPI litellm with its "proxy" extra) into $AGENTMILL_PEERS_DIR/litellm:
# the Messages API peer (/v1/messages) that tests/peer/test_anthropic_litellm.py puts in front of
# the llama.cpp peer. A no-op when already installed.
#
# The "proxy" extra of litellm 1.110 pins litellm-proxy, litellm-proxy-extras and
# litellm-enterprise to exact versions that a package mirror may not hold (litellm's wheel carries
# the proxy server itself). When `pip install litellm[proxy]` cannot resolve, the extra's other
# requirements are installed as declared, those three unpinned (litellm-proxy left out).
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
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
echo "bin/peers/litellm.sh: installing $BUILD" >&2
if ! "${PIP[@]}" "$BUILD"; then
  echo "bin/peers/litellm.sh: the extra does not resolve here; installing its parts" >&2
  "${PIP[@]}" "litellm==$LITELLM_VERSION"
  mapfile -t REQS < <("$VENV/bin/python" - <<'PY'
import re
from importlib.metadata import requires
loose = {"litellm-proxy-extras", "litellm-enterprise"}
for r in requires("litellm") or []:
    spec, _, marker = r.partition(";")
    if not re.search(r"extra\s*==\s*['\"]proxy['\"]", marker):
        continue
    name = re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0]
    if name == "litellm-proxy":
        continue
    env = re.sub(r"\s*(and\s+)?extra\s*==\s*['\"]proxy['\"]", "", marker).strip()
    req = name if name in loose else spec.strip()
    print(f"{req}; {env}" if env else req)
PY
  )
  "${PIP[@]}" "${REQS[@]}"
fi
echo "$BUILD" > "$STAMP"
