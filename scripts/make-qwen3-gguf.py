#!/usr/bin/env python3
"""Writes a GGUF file of Qwen3-0.6B's shape with random weights, for speed comparisons.

tokenmill can run Qwen3-0.6B's shape without a download (`--load-format dummy --model
qwen3-0.6b`), but llama.cpp's llama-server needs a file. This script writes one: architecture
`qwen3`, 28 layers, hidden 1024, 16 query / 8 KV heads of 128, MLP 3072, vocabulary 151,936,
q/k norms, rope base 1e6, tied embeddings (no output.weight), every matrix (token_embd too) in
Q4_0 or Q8_0 and the norms in F32. Both servers then load the same bits, so their speed can be
compared on a model ~5x larger than the default SmolLM2-135M.

The weights are seeded normal values with std 0.02 (norm weights 1), magnitudes like a real
model's so activations stay finite; the text it generates is meaningless. The tokenizer
(`tokenizer.ggml.*` and the chat template) is copied from the default model, SmolLM2-135M-Instruct
(see scripts/fetch-model.sh), and its 49,152 tokens are padded with `<|pad_N|>` tokens up to the
embedding's 151,936 rows, which both servers require to match. The padding is of type NORMAL, not
UNUSED: random weights generate padding ids as readily as real ones (two thirds of the ids), and
llama-server streams an UNUSED token as empty text, which the benchmark client skips as no token
(it would see fewer token arrivals from llama-server than from tokenmill, which prints the
token's text either way).

    scripts/make-qwen3-gguf.py q4_0          # prints ~/.cache/tokenmill/models/qwen3-0.6b-dummy-q4_0.gguf
    scripts/make-qwen3-gguf.py q8_0 --seed 1 --output /tmp/q8.gguf

An existing output file is kept and its path printed at once (writing one takes about a minute);
--force writes it again.

gguf-py (llama.cpp's Python GGUF package) is taken from the llama.cpp source that
scripts/build-llama-server.sh unpacks into ~/.cache/tokenmill/llama.cpp/<version>/, or from
--gguf-py PATH. Needs numpy.
"""

import argparse
import os
import sys
import zlib
from pathlib import Path

# Qwen3-0.6B's config.json (the same numbers as ModelConfig::qwen3_0_6b in the engine).
SHAPE = dict(
    vocab_size=151_936,
    hidden_size=1024,
    intermediate_size=3072,
    num_layers=28,
    num_heads=16,
    num_kv_heads=8,
    head_dim=128,
    context_length=40_960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
)
WEIGHT_STD = 0.02
# Rows quantized at a time, so the embedding (151,936 x 1024) never needs several f32 copies.
QUANTIZE_ROWS = 8192

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tokenmill"
MODEL_DIR = Path(os.environ.get("TOKENMILL_MODEL_DIR", CACHE / "models"))
LLAMA_CPP_VERSION = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("type", choices=["q4_0", "q8_0"], help="storage type of every matrix")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="default: <model cache>/qwen3-0.6b-dummy-TYPE[-seedN].gguf")
    p.add_argument("--force", action="store_true", help="write the file even if it exists")
    p.add_argument(
        "--tokenizer-from",
        type=Path,
        default=MODEL_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf",
        help="GGUF whose tokenizer metadata is copied (default: the default model, scripts/fetch-model.sh)",
    )
    p.add_argument(
        "--gguf-py",
        type=Path,
        default=CACHE / "llama.cpp" / LLAMA_CPP_VERSION / "src/vendor/llama.cpp/gguf-py",
        help="llama.cpp's gguf-py directory (default: the one scripts/build-llama-server.sh unpacks)",
    )
    return p.parse_args()


def import_gguf(path):
    if not (path / "gguf" / "__init__.py").is_file():
        sys.exit(f"no gguf-py at {path}: run scripts/build-llama-server.sh or pass --gguf-py")
    sys.path.insert(0, str(path))
    import gguf

    return gguf


def tensor_shapes(s):
    """Every tensor's name and shape in numpy order (rows, columns); 1-D ones are norms."""
    h, q, kv = s["hidden_size"], s["num_heads"] * s["head_dim"], s["num_kv_heads"] * s["head_dim"]
    yield "token_embd.weight", (s["vocab_size"], h)
    for i in range(s["num_layers"]):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (h,)
        yield b + "attn_q.weight", (q, h)
        yield b + "attn_k.weight", (kv, h)
        yield b + "attn_v.weight", (kv, h)
        yield b + "attn_q_norm.weight", (s["head_dim"],)
        yield b + "attn_k_norm.weight", (s["head_dim"],)
        yield b + "attn_output.weight", (h, q)
        yield b + "ffn_norm.weight", (h,)
        yield b + "ffn_gate.weight", (s["intermediate_size"], h)
        yield b + "ffn_up.weight", (s["intermediate_size"], h)
        yield b + "ffn_down.weight", (h, s["intermediate_size"])
    yield "output_norm.weight", (h,)


def random_matrix(np, shape, seed, name):
    """Seeded per tensor name, so a tensor does not depend on the order of the others."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(WEIGHT_STD)


def quantize(gguf, np, matrix, qtype):
    parts = [
        gguf.quants.quantize(matrix[r : r + QUANTIZE_ROWS], qtype)
        for r in range(0, matrix.shape[0], QUANTIZE_ROWS)
    ]
    return np.concatenate(parts)


def add_tensors(gguf, np, writer, qtype, seed):
    for name, shape in tensor_shapes(SHAPE):
        if len(shape) == 1:
            writer.add_tensor(name, np.ones(shape, dtype=np.float32))
        else:
            matrix = random_matrix(np, shape, seed, name)
            writer.add_tensor(name, quantize(gguf, np, matrix, qtype), raw_dtype=qtype)


def add_model_metadata(gguf, writer, file_type):
    s = SHAPE
    writer.add_name("Qwen3-0.6B-shaped dummy (random weights)")
    writer.add_context_length(s["context_length"])
    writer.add_embedding_length(s["hidden_size"])
    writer.add_block_count(s["num_layers"])
    writer.add_feed_forward_length(s["intermediate_size"])
    writer.add_head_count(s["num_heads"])
    writer.add_head_count_kv(s["num_kv_heads"])
    writer.add_key_length(s["head_dim"])
    writer.add_value_length(s["head_dim"])
    writer.add_rope_freq_base(s["rope_theta"])
    writer.add_layer_norm_rms_eps(s["rms_norm_eps"])
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def padded(key, values, n, gguf):
    """Pads the per-token arrays up to n entries with tokens no text encodes to (no merge makes them)."""
    extra = range(len(values), n)
    if key == "tokenizer.ggml.tokens":
        return values + [f"<|pad_{i}|>" for i in extra]
    if key == "tokenizer.ggml.token_type":
        return values + [int(gguf.TokenType.NORMAL)] * len(extra)
    if key == "tokenizer.ggml.scores":
        return values + [0.0] * len(extra)
    return values


def copy_tokenizer(gguf, writer, source, vocab_size):
    """Copies every `tokenizer.*` key of source, padding the per-token arrays to vocab_size."""
    reader = gguf.GGUFReader(source)
    n_tokens = len(reader.fields["tokenizer.ggml.tokens"].data)
    if n_tokens > vocab_size:
        sys.exit(f"{source} has {n_tokens} tokens, more than the {vocab_size} embedding rows")
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        value = field.contents()
        sub_type = None
        if vtype == gguf.GGUFValueType.ARRAY:
            sub_type = field.types[-1]
            value = padded(key, value, vocab_size, gguf)
        writer.add_key_value(key, value, vtype, sub_type)
    return n_tokens


def main():
    args = parse_args()
    seed_suffix = f"-seed{args.seed}" if args.seed else ""
    output = args.output or MODEL_DIR / f"qwen3-0.6b-dummy-{args.type}{seed_suffix}.gguf"
    if output.is_file() and not args.force:
        print(output)
        return
    gguf = import_gguf(args.gguf_py)
    import numpy as np

    if not args.tokenizer_from.is_file():
        sys.exit(f"no {args.tokenizer_from}: run scripts/fetch-model.sh or pass --tokenizer-from")
    qtype = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q8_0": gguf.GGMLQuantizationType.Q8_0}[args.type]
    file_type = {"q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[args.type]
    output.parent.mkdir(parents=True, exist_ok=True)

    writer = gguf.GGUFWriter(str(output) + ".tmp", "qwen3")
    add_model_metadata(gguf, writer, file_type)
    n_tokens = copy_tokenizer(gguf, writer, args.tokenizer_from, SHAPE["vocab_size"])
    add_tensors(gguf, np, writer, qtype, args.seed)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(str(output) + ".tmp", output)
    print(
        f"{args.type}, seed {args.seed}, {n_tokens} tokens from {args.tokenizer_from.name} "
        f"padded to {SHAPE['vocab_size']}, {output.stat().st_size / 2**20:.0f} MiB",
        file=sys.stderr,
    )
    print(output)


if __name__ == "__main__":
    main()
