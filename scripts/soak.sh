#!/usr/bin/env bash
# The server's soak (crates/server/tests/soak.rs) run longer than CI runs it: N streaming
# requests (default 3000) at concurrency 32, a third of the clients leaving early, then the
# same checks (nothing left running, no KV block held, no 5xx, no resident growth over the
# second half, the same greedy answer as a fresh server) and the overload test.
#   scripts/soak.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh >/dev/null
TOKENMILL_SOAK_REQUESTS="${1:-3000}" \
  cargo test --profile ci -p tokenmill-server --test soak -- --nocapture --test-threads 1
