#!/usr/bin/env bash
# tokenmill beside llama.cpp on the real Gemma 3 file (google/gemma-3-270m Q4_K_M, from
# scripts/fetch-gemma3.sh), both from the same machine and the same file:
#   ppl     perplexity over crates/tokenmill/tests/fixtures/texts/alice-chapters-1-4.txt with a
#           context of 512 (every whole chunk): `tokenmill perplexity` and llama.cpp's
#           `llama-perplexity` (built beside llama-server by scripts/build-llama-server.sh);
#           prints both final estimates and their ratio, and beside them tokenmill's with
#           `--weight-mode f32` (the file's weights dequantized, f32 activations: the yardstick
#           both quantized paths round away from). Deterministic: load does not move it.
#   greedy  each prompt of scripts/gemma3-vs-llama-prompts.json to both servers, 16 greedy
#           tokens (temperature 0, ignoring EOS); counts the prompts whose 16 token ids agree
#           and shows where the others part. Both servers are asked for token ids: llama-server's
#           `/completion` with `return_tokens`, tokenmill's `/v1/completions` with
#           `return_tokens_as_token_ids`; the prompt token counts must match (both add BOS).
#           Where they part, the f32 yardstick's tokens say which side it follows, and each
#           side's count of prompts equal to it is printed. llama-server runs twice, with flash
#           attention on and off (both exact algorithms, rounded differently): how often
#           llama.cpp agrees with itself is the floor that two quantized engines can be held to.
# Usage: scripts/gemma3-vs-llama.sh [ppl|greedy|all]   (default all)
# TOKENMILL names the binary (default target/ci/tokenmill: cargo build --profile ci -p tokenmill).
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT="${1:-all}"
TM="${TOKENMILL:-target/ci/tokenmill}"
[ -x "$TM" ] || { echo "no tokenmill binary at $TM: cargo build --profile ci -p tokenmill" >&2; exit 1; }
MODEL="$(scripts/fetch-gemma3.sh)"
LLAMA_SERVER="$(scripts/build-llama-server.sh)"
LLAMA_PPL="$(dirname "$LLAMA_SERVER")/llama-perplexity"
TEXT=crates/tokenmill/tests/fixtures/texts/alice-chapters-1-4.txt
PROMPTS=scripts/gemma3-vs-llama-prompts.json
THREADS="$(nproc)"
CTX=512
OUT="$(mktemp -d)"; trap 'rm -rf "$OUT"; kill $(jobs -p) 2>/dev/null || true' EXIT

ppl() {
  echo "== perplexity, $TEXT, context $CTX, all chunks"
  "$LLAMA_PPL" -m "$MODEL" -f "$TEXT" -c "$CTX" -t "$THREADS" >"$OUT/llama.out" 2>"$OUT/llama.err" \
    || { tail -20 "$OUT/llama.err" >&2; exit 1; }
  RUST_LOG=warn "$TM" perplexity --model "$MODEL" --file "$TEXT" --ctx-size "$CTX" >"$OUT/ours.out" 2>"$OUT/ours.err" \
    || { tail -20 "$OUT/ours.err" >&2; exit 1; }
  RUST_LOG=warn "$TM" perplexity --model "$MODEL" --weight-mode f32 --file "$TEXT" --ctx-size "$CTX" \
    >"$OUT/f32.out" 2>"$OUT/f32.err" || { tail -20 "$OUT/f32.err" >&2; exit 1; }
  grep -h "calculating perplexity" "$OUT/llama.err" | sed 's/^.*perplexity: /llama-perplexity: /'
  grep -h "^perplexity:" "$OUT/ours.err" | sed 's/^perplexity: /tokenmill: /'
  python3 - "$OUT/llama.out" "$OUT/llama.err" "$OUT/ours.out" "$OUT/f32.out" <<'PY'
import re, sys
def final(*paths):
    for p in paths:
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", open(p).read())
        if m:
            return float(m.group(1)), float(m.group(2))
    sys.exit(f"no final estimate in {paths}")
llama, llama_err = final(sys.argv[1], sys.argv[2])
ours, ours_err = final(sys.argv[3])
exact, exact_err = final(sys.argv[4])
print(f"llama-perplexity  PPL = {llama:.4f} +/- {llama_err:.5f}")
print(f"tokenmill         PPL = {ours:.4f} +/- {ours_err:.5f}")
print(f"tokenmill f32     PPL = {exact:.4f} +/- {exact_err:.5f}  (--weight-mode f32: the file's weights dequantized)")
print(f"ratio tokenmill / llama.cpp = {ours / llama:.5f} ({(ours / llama - 1) * 100:+.3f}%)")
PY
}

wait_ready() {
  for _ in $(seq 1 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "$2 did not become ready at $1" >&2; exit 1
}

greedy() {
  echo "== greedy, $(python3 -c "import json,sys;print(len(json.load(open(sys.argv[1]))))" "$PROMPTS") prompts of $PROMPTS, 16 tokens each"
  "$LLAMA_SERVER" -m "$MODEL" --port 18771 --threads "$THREADS" --parallel 1 -c 1024 \
    --no-cache-prompt >"$OUT/llama-server.log" 2>&1 &
  "$LLAMA_SERVER" -m "$MODEL" --port 18774 --threads "$THREADS" --parallel 1 -c 1024 \
    --no-cache-prompt --flash-attn on >"$OUT/llama-server-fa-on.log" 2>&1 &
  "$LLAMA_SERVER" -m "$MODEL" --port 18775 --threads "$THREADS" --parallel 1 -c 1024 \
    --no-cache-prompt --flash-attn off >"$OUT/llama-server-fa-off.log" 2>&1 &
  RUST_LOG=warn "$TM" serve --model "$MODEL" --port 18772 >"$OUT/tokenmill-server.log" 2>&1 &
  RUST_LOG=warn "$TM" serve --model "$MODEL" --weight-mode f32 --port 18773 >"$OUT/tokenmill-f32.log" 2>&1 &
  wait_ready http://127.0.0.1:18771 llama-server
  wait_ready http://127.0.0.1:18774 "llama-server --flash-attn on"
  wait_ready http://127.0.0.1:18775 "llama-server --flash-attn off"
  wait_ready http://127.0.0.1:18772 tokenmill
  wait_ready http://127.0.0.1:18773 "tokenmill --weight-mode f32"
  python3 - "$PROMPTS" http://127.0.0.1:18771 http://127.0.0.1:18772 http://127.0.0.1:18773 "$TEXT" \
    http://127.0.0.1:18774 http://127.0.0.1:18775 <<'PY'
import json, sys, urllib.request
prompts, llama, ours, exact, text_path, fa_on, fa_off = json.load(open(sys.argv[1])), *sys.argv[2:8]
N = 16
def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)
# The perplexity text as llama-perplexity reads it (less one trailing newline), both tokenizers.
text_in = open(text_path, encoding="utf-8").read().removesuffix("\n")
a = post(f"{llama}/tokenize", {"content": text_in, "add_special": True})["tokens"]
b = post(f"{ours}/tokenize", {"prompt": text_in, "add_special_tokens": True})["tokens"]
print(f"the perplexity text: {len(a)} tokens from llama-server, {len(b)} from tokenmill, "
      f"{'identical' if a == b else 'DIFFERENT'}")
def llama_ids(prompt, server=llama):
    r = post(f"{server}/completion", {"prompt": prompt, "n_predict": N, "temperature": 0,
             "top_k": 1, "ignore_eos": True, "return_tokens": True, "cache_prompt": False})
    return r["tokens"], r["tokens_evaluated"]
def ours_ids(server, prompt):
    r = post(f"{server}/v1/completions", {"prompt": prompt, "max_tokens": N, "temperature": 0,
             "ignore_eos": True, "logprobs": 0, "return_tokens_as_token_ids": True})
    ids = [int(t.split(":", 1)[1]) for t in r["choices"][0]["logprobs"]["tokens"]]
    return ids, r["usage"]["prompt_tokens"]
def text(ids):
    return post(f"{llama}/detokenize", {"tokens": ids})["content"]
def common(x, y):
    return next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
agree = {"llama-server = tokenmill": 0, "llama-server = f32": 0, "tokenmill = f32": 0}
for p in prompts:
    (a, na), (b, nb), (c, nc) = llama_ids(p), ours_ids(ours, p), ours_ids(exact, p)
    if not na == nb == nc:
        sys.exit(f"prompt {p!r}: llama-server evaluated {na} prompt tokens, tokenmill {nb}, f32 {nc}")
    same = common(a, b)
    for key, (x, y) in zip(agree, [(a, b), (a, c), (b, c)]):
        agree[key] += common(x, y) == N
    print(f"{'same' if same == N else 'DIFF'} {same:2d}/{N} {p!r}")
    if same < N:
        print(f"      common  {text(a[:same])!r}")
        print(f"      llama   {text(a[same:])!r}  {a[same:]}")
        print(f"      ours    {text(b[same:])!r}  {b[same:]}")
        print(f"      f32     agrees with llama for {common(a, c)} tokens, with ours for {common(b, c)}")
print(f"{agree['llama-server = tokenmill']} of {len(prompts)} prompts agree on all {N} greedy tokens")
print("against tokenmill --weight-mode f32 (the file's weights dequantized, f32 activations): "
      + ", ".join(f"{k}: {v}" for k, v in agree.items()))
# Every pair of the five: prompts whose 16 greedy ids agree.
runs = {"llama": [llama_ids(p)[0] for p in prompts],
        "llama fa on": [llama_ids(p, fa_on)[0] for p in prompts],
        "llama fa off": [llama_ids(p, fa_off)[0] for p in prompts],
        "tokenmill": [ours_ids(ours, p)[0] for p in prompts],
        "tokenmill f32": [ours_ids(exact, p)[0] for p in prompts]}
names = list(runs)
print(f"prompts of {len(prompts)} whose {N} greedy tokens agree, every pair:")
print(" " * 14 + "".join(f"{n:>15}" for n in names))
for x in names:
    row = [sum(common(a, b) == N for a, b in zip(runs[x], runs[y])) for y in names]
    print(f"{x:>14}" + "".join(f"{v:>15}" for v in row))
PY
}

case "$WHAT" in
  ppl) ppl ;;
  greedy) greedy ;;
  all) ppl; greedy ;;
  *) echo "usage: $0 [ppl|greedy|all]" >&2; exit 1 ;;
esac
