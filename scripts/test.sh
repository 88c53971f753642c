#!/usr/bin/env bash
# Runs every test: fetches the default model and gemma-3-270m (cached), prepares the official openai Python
# SDK (for the server's compatibility test), pyzmq + msgpack (for the KV-event subscriber) and
# SGLang's and vLLM's routers from PyPI (for the test that puts each in front of two servers;
# ~10 s to install, skipped where they cannot be), then the whole workspace in the `ci` profile:
# release optimization with our crates' debug assertions and overflow checks on (Cargo.toml),
# so the invariant checks run where the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh >/dev/null
# The real Gemma 3 file (253 MB, cached) for the tokenizer tests held to llama.cpp
# (crates/server/tests/it/gemma3_tokenizer.rs), which say SKIPPED without it.
scripts/fetch-gemma3.sh >/dev/null ||
  echo "note: gemma-3-270m could not be fetched; tests/it/gemma3_tokenizer.rs will say SKIPPED"
VENV="${TOKENMILL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill/venv}"
if ! "$VENV/bin/python" -c 'import openai' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet openai
fi
# The official anthropic SDK for the Messages API test (crates/server/tests/it/anthropic_messages.rs),
# which says SKIPPED where it cannot be installed.
if ! "$VENV/bin/python" -c 'import anthropic' 2>/dev/null; then
  "$VENV/bin/pip" install --quiet anthropic ||
    echo "pip could not install anthropic: the Anthropic SDK test will be SKIPPED"
fi
# LangChain's OpenAI client for its test (crates/server/tests/it/langchain_client.rs), which
# says SKIPPED where it cannot be installed.
if ! "$VENV/bin/python" -c 'import langchain_openai' 2>/dev/null; then
  "$VENV/bin/pip" install --quiet langchain-openai ||
    echo "pip could not install langchain-openai: the LangChain client test will be SKIPPED"
fi
# pyzmq and msgpack for the KV-cache event subscriber (crates/server/tests/it/kv_events.rs),
# which says SKIPPED where they cannot be installed.
if ! "$VENV/bin/python" -c 'import zmq, msgpack' 2>/dev/null; then
  "$VENV/bin/pip" install --quiet pyzmq msgpack ||
    echo "pip could not install pyzmq and msgpack: the KV-event subscriber test will be SKIPPED"
fi
# The official huggingface_hub client, which fetches from the local Hub the model-by-name tests
# start and shares its cache with tokenmill (crates/tokenmill/tests/it/hub_models.rs); that
# test says SKIPPED where it cannot be installed.
if ! "$VENV/bin/python" -c 'import huggingface_hub' 2>/dev/null; then
  "$VENV/bin/pip" install --quiet huggingface_hub ||
    echo "pip could not install huggingface_hub: the Hub client cross-check will be SKIPPED"
fi
if ! "$VENV/bin/python" -c 'import sglang_router, vllm_router' 2>/dev/null; then
  "$VENV/bin/pip" install --quiet sglang-router==0.3.2 vllm-router==0.1.17 ||
    echo "note: the routers could not be installed; tests/it/routers.rs will say SKIPPED"
fi
export TOKENMILL_PYTHON="$VENV/bin/python"
# The full tier: a test that needs the default model fails where it is missing, rather than
# saying SKIPPED as the offline tier (plain `cargo test`) lets it (docs/testing.md).
export TOKENMILL_REQUIRE_MODEL=1
LOG=$(mktemp); trap 'rm -f "$LOG"' EXIT
status=0
cargo test --profile ci --workspace "$@" 2>&1 | tee "$LOG" || status=$?
# One closing line for the whole workspace (cargo's last line is only the last binary's).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$LOG"
exit "$status"
