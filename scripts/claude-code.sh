#!/usr/bin/env bash
# Claude Code, headless, against tokenmill's Anthropic Messages API (docs/api.md,
# "POST /v1/messages"): serves gemma-3-270m (its 32k context holds Claude Code's system prompt
# and tool list), installs @anthropic-ai/claude-code from npm into a cache folder, and runs
# `claude -p` with ANTHROPIC_BASE_URL pointed at the server. Prints Claude Code's answer and
# exits with its status. Too slow for CI: Claude Code 2.1's first prompt is ~19,600 tokens
# (system prompt and 24 tools), minutes of prefill on a few busy CPU cores; the prefix cache
# makes a second run start generating at once. CLAUDE_CODE_MAX_OUTPUT_TOKENS (default 256 here)
# bounds the reply; the reply ends sooner where the model closes its turn (`<end_of_turn>`).
#
# Usage: scripts/claude-code.sh ["prompt"]
#   env: PORT (default 8123), CLAUDE_CODE_DIR, PROFILE (cargo profile, default release)
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT="${1:-Reply with one word: hello.}"
PORT="${PORT:-8123}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tokenmill"
CLAUDE_CODE_DIR="${CLAUDE_CODE_DIR:-$CACHE/claude-code}"
MODEL=$(scripts/fetch-gemma3.sh)
if [ ! -x "$CLAUDE_CODE_DIR/node_modules/.bin/claude" ]; then
  mkdir -p "$CLAUDE_CODE_DIR"
  npm install --silent --prefix "$CLAUDE_CODE_DIR" @anthropic-ai/claude-code >&2
fi
PROFILE="${PROFILE:-release}"
cargo build --profile "$PROFILE" -p tokenmill >&2
LOG=$(mktemp)
# The GGUF carries no chat template: scripts/gemma3-chat-template.jinja is Gemma 3's (text only).
"${CARGO_TARGET_DIR:-target}/$PROFILE/tokenmill" serve --model "$MODEL" --port "$PORT" \
  --max-model-len 32768 --chat-template scripts/gemma3-chat-template.jinja \
  >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 1
done
# Any key works without --api-key; Claude Code wants one set. Its `claude-*` model names all
# mean the model served. Non-essential traffic (telemetry, update checks) is turned off: the
# server answers only the Messages API.
ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" \
ANTHROPIC_API_KEY=unused \
API_TIMEOUT_MS="${API_TIMEOUT_MS:-1800000}" \
CLAUDE_CODE_MAX_OUTPUT_TOKENS="${CLAUDE_CODE_MAX_OUTPUT_TOKENS:-256}" \
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
DISABLE_TELEMETRY=1 \
  "$CLAUDE_CODE_DIR/node_modules/.bin/claude" -p "$PROMPT"
