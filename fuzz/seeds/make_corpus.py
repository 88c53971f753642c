#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (git-ignored; rerun to recreate them).

Seeds are real inputs: request bodies like the ones clients send, text the tokenizer meets, and
for the GGUF reader the real model's first bytes plus a tiny but complete Llama GGUF, written
here, that loads, so mutations start from a file that reaches the model loader.
"""
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


COMPLETIONS = [
    '{"prompt": "Hello, my name is", "max_tokens": 16, "temperature": 0}',
    '{"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": ["a", "b"], "n": 2, "seed": 7, "stop": ["\\n", "."], "logprobs": 2, "echo": true}',
    '{"prompt": [1, 2, 3], "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}, "top_k": 5, "top_p": 0.9, "min_p": 0.1}',
    '{"prompt": [[1, 2], [3]], "logit_bias": {"42": -100, "7": 5}, "stop_token_ids": [2], "min_tokens": 1, "ignore_eos": true}',
    '{"prompt": "x", "prompt_logprobs": 3, "repetition_penalty": 1.1, "frequency_penalty": 0.5, "presence_penalty": -0.5, "include_stop_str_in_output": true, "return_tokens_as_token_ids": true}',
    '{"prompt": "x", "suffix": "", "user": "u", "best_of": 1, "skip_special_tokens": false, "priority": 1}',
]
CHAT = [
    '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}',
    '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5}',
    '{"messages": [{"role": "developer", "content": null}, {"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}], "add_generation_prompt": false, "chat_template_kwargs": {"enable_thinking": false}}',
    '{"messages": [{"role": "user", "content": "Hi"}], "stream": true, "n": 3, "stop": "!", "response_format": {"type": "text"}, "tools": []}',
    '{"messages": [{"role": "user", "content": "Weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "tool_choice": "required", "parallel_tool_calls": false}',
    '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\\"a\\": 1}"}}]}, {"role": "tool", "tool_call_id": "call_1", "content": "42"}], "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}], "tool_choice": {"type": "function", "function": {"name": "g"}}, "stream": true}',
]
TEXTS = [
    "Hello, world! How are you today?",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "fn main() {\n    println!(\"{}\", 12345 * 678);\n}\n",
    "Ünïcödé — 日本語のテキスト 🦀🚀 \u00a0\t\r\n  spaces   ",
    "<|endoftext|><|im_end|><think></think>",
]


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(v):
    """(type id, bytes) for the few value kinds the tiny model needs."""
    if isinstance(v, bool):
        return 7, struct.pack("<?", v)
    if isinstance(v, int):
        return 4, struct.pack("<I", v)
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, str):
        return 8, gguf_string(v)
    if isinstance(v, list):
        kind, _ = gguf_value(v[0])
        body = b"".join(gguf_value(x)[1] for x in v)
        return 9, struct.pack("<IQ", kind, len(v)) + body
    raise TypeError(v)


def tiny_llama():
    """A complete one-layer Llama GGUF (vocab 8, width 8) with a byte-level tokenizer."""
    vocab, hidden, inter, heads = 8, 8, 16, 2
    tokens = ["a", "b", "ab", "Ġ", "Ġa", "<|im_start|>", "<|im_end|>", "c"]
    metadata = {
        "general.architecture": "llama",
        "general.alignment": 32,
        "llama.embedding_length": hidden,
        "llama.feed_forward_length": inter,
        "llama.block_count": 1,
        "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": 1,
        "llama.context_length": 128,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.rope.freq_base": 10000.0,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": ["a b", "Ġ a"],
        "tokenizer.ggml.token_type": [1, 1, 1, 1, 1, 3, 3, 1],
        "tokenizer.ggml.bos_token_id": 5,
        "tokenizer.ggml.eos_token_id": 6,
        "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    }
    head_dim = hidden // heads
    shapes = {
        "token_embd.weight": [vocab, hidden],
        "output_norm.weight": [hidden],
        "blk.0.attn_norm.weight": [hidden],
        "blk.0.ffn_norm.weight": [hidden],
        "blk.0.attn_q.weight": [hidden, hidden],
        "blk.0.attn_k.weight": [head_dim, hidden],
        "blk.0.attn_v.weight": [head_dim, hidden],
        "blk.0.attn_output.weight": [hidden, hidden],
        "blk.0.ffn_gate.weight": [inter, hidden],
        "blk.0.ffn_up.weight": [inter, hidden],
        "blk.0.ffn_down.weight": [hidden, inter],
    }
    out = b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(metadata))
    for key, value in metadata.items():
        kind, body = gguf_value(value)
        out += gguf_string(key) + struct.pack("<I", kind) + body
    data, offset = b"", 0
    for name, shape in shapes.items():
        count = 1
        for d in shape:
            count *= d
        # GGUF lists dimensions innermost first; type 0 is F32.
        out += gguf_string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in reversed(shape))
        out += struct.pack("<IQ", 0, offset)
        tensor = b"".join(struct.pack("<f", 0.01 * ((i % 7) - 3)) for i in range(count))
        tensor += b"\0" * (-len(tensor) % 32)
        data += tensor
        offset += len(tensor)
    out += b"\0" * (-len(out) % 32)
    return out + data


def main():
    for i, body in enumerate(COMPLETIONS):
        write("request_plan", f"completions-{i}", b"\0" + body.encode())
    for i, body in enumerate(CHAT):
        write("request_plan", f"chat-{i}", b"\1" + body.encode())
    for i, text in enumerate(TEXTS):
        write("tokenizer", f"text-{i}", text)
    write("gguf", "tiny-llama", tiny_llama())
    model = subprocess.run(
        [os.path.join(HERE, "..", "..", "scripts", "fetch-model.sh")],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    with open(model, "rb") as f:
        # The real header's start (magic, counts, first metadata); the whole header is megabytes.
        write("gguf", "smollm2-prefix", f.read(4096))
    os.makedirs(os.path.join(CORPUS, "detokenizer"), exist_ok=True)
    print(f"seed corpora written under {os.path.normpath(CORPUS)}", file=sys.stderr)


if __name__ == "__main__":
    main()
