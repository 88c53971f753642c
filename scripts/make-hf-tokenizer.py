#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json) from a
GGUF model's byte-level BPE vocabulary, for tools that tokenize on their own and want HF files,
e.g. vllm-router's kv_aware policy (VLLM_ROUTER_TOKENIZER=DIR):

    scripts/make-hf-tokenizer.py MODEL.gguf OUT_DIR

Needs the `gguf` and `tokenizers` packages (pip install gguf tokenizers; no torch).
Handles `tokenizer.ggml.model` "gpt2" with the pre-tokenizers SmolLM and GPT-2 use;
anything else is refused rather than converted wrongly.
"""

import json
import os
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [int(f.parts[i][0]) for i in f.data]
    value = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(value).decode("utf-8")
    return value[0].item()

def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, out = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(path)
    model = field(reader, "tokenizer.ggml.model")
    pre = field(reader, "tokenizer.ggml.pre") or "default"
    if model != "gpt2":
        sys.exit(f"{path}: tokenizer model {model!r}: only gpt2 (byte-level BPE) is handled")
    if pre not in ("smollm", "gpt-2", "default"):
        sys.exit(f"{path}: pre-tokenizer {pre!r}: only smollm and gpt-2 are handled")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        # SmolLM's tokenizer.json: each digit on its own, then GPT-2's byte-level split.
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    # Control tokens (GGUF token type 3) are matched whole, as llama.cpp and tokenmill do.
    special = [t for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])

    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))

    def name(key):
        i = field(reader, key)
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name("tokenizer.ggml.bos_token_id"),
        "eos_token": name("tokenizer.ggml.eos_token_id"),
        "unk_token": name("tokenizer.ggml.unknown_token_id"),
        "pad_token": name("tokenizer.ggml.padding_token_id"),
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token") or False),
        "model_max_length": int(field(reader, "llama.context_length") or 2048),
    }
    template = field(reader, "tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"{out}: {len(tokens)} tokens, {len(merges)} merges, {len(special)} special, pre {pre}")

if __name__ == "__main__":
    main()
