#!/usr/bin/env bash
# Runs every test: fetches the default model (cached), prepares the official openai Python
# SDK (for the server's compatibility test), then the whole workspace in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh >/dev/null
VENV="${TOKENMILL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/venv}"
if ! "$VENV/bin/python" -c 'import openai' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet openai
fi
export TOKENMILL_PYTHON="$VENV/bin/python"
cargo test --release --workspace "$@"
