#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU only, no curl) from the llama.cpp source
# vendored in the llama-cpp-python sdist, cached by version:
#   ${DPRAG_CACHE:-~/.cache/dprag}/llama-server/<version>/bin/llama-server
# The llama.cpp source (with convert_hf_to_gguf.py and gguf-py) is kept beside it, in src/.
# Usage: scripts/build_llama_server.sh [--cached] [VERSION]   (prints the binary's path)
#   --cached: print the path if the binary is cached, else exit 1 (never builds)
# Env: PIP (default .venv/bin/pip), JOBS (default: nproc), NICE (default 19).
set -euo pipefail
CACHED_ONLY=0
if [[ "${1:-}" == "--cached" ]]; then
  CACHED_ONLY=1
  shift
fi
VERSION="${1:-${DPRAG_LLAMA_CPP_PYTHON:-0.3.36}}"
CACHE="${DPRAG_CACHE:-$HOME/.cache/dprag}/llama-server/$VERSION"
BIN="$CACHE/bin/llama-server"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
if [[ "$CACHED_ONLY" == 1 ]]; then
  exit 1
fi
PIP="${PIP:-.venv/bin/pip}"
mkdir -p "$CACHE"
if [[ ! -d "$CACHE/src" ]]; then
  tmp="$(mktemp -d "$CACHE/download.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  "$PIP" download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: \
    --dest "$tmp" --quiet >&2
  tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
  rm -rf "$CACHE/src.partial"
  mv "$tmp"/llama_cpp_python-"$VERSION"/vendor/llama.cpp "$CACHE/src.partial"
  rm -rf "$tmp"
  mv "$CACHE/src.partial" "$CACHE/src"
fi
cmake -S "$CACHE/src" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
  -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF >&2
nice -n "${NICE:-19}" cmake --build "$CACHE/build" --target llama-server \
  -j "${JOBS:-$(nproc)}" >&2
mkdir -p "$CACHE/bin.partial"
cp "$CACHE/build/bin/llama-server" "$CACHE/bin.partial/"
rm -rf "$CACHE/bin"
mv "$CACHE/bin.partial" "$CACHE/bin"
echo "$BIN"
