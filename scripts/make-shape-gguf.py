#!/usr/bin/env python3
"""Writes a GGUF file of a real model's shape with random weights, for speed comparisons.

Neither tokenmill nor llama-server cares what the weights say when it is timed, only how many
there are, in what shape and format. This script writes a file with a real model's shape and
random quantized blocks, so both servers can be measured on the sizes people serve from CPUs
without downloading gigabytes (issue 52: "Measured where users run").

    scripts/make-shape-gguf.py --shape llama-3.2-1b --type q4_k_m          # prints the path
    scripts/make-shape-gguf.py --shape llama-3.1-8b --type q4_0 /tmp/l8.gguf
    scripts/make-shape-gguf.py --shape qwen3-8b --type q8_0 --layers 2      # a quick small file

The shapes, from each model's config.json (Hugging Face):

  shape          arch   layers hidden heads kv head_dim   ffn   vocab  rope theta  eps   tied  ctx
  llama-3.2-1b   llama    16    2048    32   8     64     8192 128,256     500,000 1e-5  yes  131,072
  llama-3.1-8b   llama    32    4096    32   8    128    14336 128,256     500,000 1e-5  no   131,072
  qwen3-8b       qwen3    36    4096    32   8    128    12288 151,936   1,000,000 1e-6  no    40,960
  qwen3-0.6b     qwen3    28    1024    16   8    128     3072 151,936   1,000,000 1e-6  yes   40,960

The Llama 3 shapes carry Llama 3's rope scaling as llama.cpp's converter writes it, a
`rope_freqs.weight` tensor (factor 32 for 3.2-1B, 8 for 3.1-8B; low/high frequency factors 1 and
4, original context 8,192). The Qwen3 shapes have per-head q/k RMS norms. A tied model has no
`output.weight`; the token embedding is the output matrix.

Types (--type):

  q4_0    every matrix (token embedding and output too) in Q4_0, norms in F32
  q8_0    every matrix in Q8_0
  q4_k_m  llama.cpp's Q4_K_M mix (llama_tensor_get_type in src/llama-quant.cpp of the llama.cpp
          build-llama-server.sh builds): Q4_K everywhere except Q6_K for output.weight (the
          token embedding when tied), and for attn_v and ffn_down in the layers where
          use_more_bits(i, n) holds (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2: about half of
          them). An untied token embedding stays Q4_K, as llama.cpp leaves it.

--layers N keeps the first N layers (the rest of the shape unchanged, the name says so): a file
that loads in seconds, for smoke tests of the scripts, not for figures.

The blocks are random bytes with their scales set so each weight has a standard deviation near
0.02, like a real model's, and activations stay finite: every f16 scale is a normal finite value
(Q4_0: d for quants -7..7 (no -8, so the mean is zero); Q8_0: d for -128..127; Q4_K: sub-block
scale = min = 32..63 and dmin = 7.5 d, so a sub-block's weights are d*sc*(q - 7.5); Q6_K: signed
sub-block scales of magnitude 4..15). Each tensor is seeded by its name and --seed, and written
as it is made, so an 8B file needs memory for one tensor, not the whole model. The text such a
model generates is meaningless.

The tokenizer (`tokenizer.ggml.*`, the chat template) is copied from the default model,
SmolLM2-135M-Instruct (scripts/fetch-model.sh), a GPT-2-style BPE that both servers accept, and
its 49,152 tokens are padded with NORMAL `<|pad_N|>` tokens to the embedding's rows, which both
servers require to match (see scripts/make-qwen3-gguf.py for why NORMAL and not UNUSED).

With no OUT the file goes to <model cache>/SHAPE-dummy-TYPE[-Nl][-seedS].gguf; an existing
output file is kept and its path printed at once (--force writes it again). gguf-py comes from
the llama.cpp source scripts/build-llama-server.sh unpacks, or --gguf-py PATH. Needs numpy.
"""

import argparse
import math
import os
import sys
import zlib
from pathlib import Path

SHAPES = {
    "llama-3.2-1b": dict(
        arch="llama", name="Llama-3.2-1B", vocab_size=128_256, hidden_size=2048,
        intermediate_size=8192, num_layers=16, num_heads=32, num_kv_heads=8, head_dim=64,
        context_length=131_072, rope_theta=500_000.0, rms_norm_eps=1e-5, tied=True,
        llama3_rope=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original=8192),
    ),
    "llama-3.1-8b": dict(
        arch="llama", name="Llama-3.1-8B", vocab_size=128_256, hidden_size=4096,
        intermediate_size=14_336, num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
        context_length=131_072, rope_theta=500_000.0, rms_norm_eps=1e-5, tied=False,
        llama3_rope=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original=8192),
    ),
    "qwen3-8b": dict(
        arch="qwen3", name="Qwen3-8B", vocab_size=151_936, hidden_size=4096,
        intermediate_size=12_288, num_layers=36, num_heads=32, num_kv_heads=8, head_dim=128,
        context_length=40_960, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tied=False,
    ),
    "qwen3-0.6b": dict(
        arch="qwen3", name="Qwen3-0.6B", vocab_size=151_936, hidden_size=1024,
        intermediate_size=3072, num_layers=28, num_heads=16, num_kv_heads=8, head_dim=128,
        context_length=40_960, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tied=True,
    ),
}
TYPES = ["q4_0", "q8_0", "q4_k_m"]
WEIGHT_STD = 0.02

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tokenmill"
MODEL_DIR = Path(os.environ.get("TOKENMILL_MODEL_DIR", CACHE / "models"))
LLAMA_CPP_VERSION = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", required=True, choices=sorted(SHAPES))
    p.add_argument("--type", required=True, choices=TYPES)
    p.add_argument("--layers", type=int, help="keep the first N layers (smoke tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write the file even if it exists")
    p.add_argument("output", nargs="?", type=Path, metavar="OUT.gguf")
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
    args = p.parse_args()
    if args.layers is not None and not 1 <= args.layers <= SHAPES[args.shape]["num_layers"]:
        p.error(f"--layers must be 1..{SHAPES[args.shape]['num_layers']} for {args.shape}")
    return args


def import_gguf(path):
    if not (path / "gguf" / "__init__.py").is_file():
        sys.exit(f"no gguf-py at {path}: run scripts/build-llama-server.sh or pass --gguf-py")
    sys.path.insert(0, str(path))
    import gguf

    return gguf


def use_more_bits(i, n):
    """llama.cpp's choice of the layers whose attn_v and ffn_down Q4_K_M keeps in Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_plan(s, kind):
    """(name, numpy shape (rows, columns) or (n,), storage) for every tensor, in file order.
    storage is a quant name or "f32"."""
    h, hd = s["hidden_size"], s["head_dim"]
    q, kv, ffn = s["num_heads"] * hd, s["num_kv_heads"] * hd, s["intermediate_size"]
    n = s["num_layers"]

    def mat(role, layer=None):
        if kind != "q4_k_m":
            return kind
        if role == "output" or (role == "token_embd" and s["tied"]):
            return "q6_k"
        if role in ("attn_v", "ffn_down") and use_more_bits(layer, n):
            return "q6_k"
        return "q4_k"

    yield "token_embd.weight", (s["vocab_size"], h), mat("token_embd")
    if "llama3_rope" in s:
        yield "rope_freqs.weight", (hd // 2,), "rope_freqs"
    for i in range(n):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (h,), "f32"
        yield b + "attn_q.weight", (q, h), mat("attn_q", i)
        yield b + "attn_k.weight", (kv, h), mat("attn_k", i)
        yield b + "attn_v.weight", (kv, h), mat("attn_v", i)
        if s["arch"] == "qwen3":
            yield b + "attn_q_norm.weight", (hd,), "f32"
            yield b + "attn_k_norm.weight", (hd,), "f32"
        yield b + "attn_output.weight", (h, q), mat("attn_output", i)
        yield b + "ffn_norm.weight", (h,), "f32"
        yield b + "ffn_gate.weight", (ffn, h), mat("ffn_gate", i)
        yield b + "ffn_up.weight", (ffn, h), mat("ffn_up", i)
        yield b + "ffn_down.weight", (h, ffn), mat("ffn_down", i)
    yield "output_norm.weight", (h,), "f32"
    if not s["tied"]:
        yield "output.weight", (s["vocab_size"], h), mat("output")


# Bytes per block and weights per block, as ggml lays them out.
BLOCK = {"q4_0": (18, 32), "q8_0": (34, 32), "q4_k": (144, 256), "q6_k": (210, 256)}


def f16_bytes(np, values):
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)


def random_blocks(np, rng, kind, n_blocks):
    """n_blocks random blocks of `kind`, (n_blocks, block bytes) uint8, weight std ~WEIGHT_STD."""
    size, _ = BLOCK[kind]
    raw = np.frombuffer(rng.bytes(n_blocks * size), dtype=np.uint8).reshape(n_blocks, size).copy()
    jitter = rng.uniform(0.75, 1.25, n_blocks).astype(np.float32)
    if kind == "q4_0":
        # block_q4_0 {f16 d; u8 qs[16]}: w = d * (nibble - 8). Nibble 0 becomes 1, so the
        # values are -7..7, centred (std sqrt(224/12) = 4.32 over the 15 values).
        qs = raw[:, 2:]
        qs += (qs & 0x0F) == 0
        qs += ((qs >> 4) == 0).astype(np.uint8) << 4
        raw[:, 0:2] = f16_bytes(np, jitter * (WEIGHT_STD / 4.32))
    elif kind == "q8_0":
        # block_q8_0 {f16 d; i8 qs[32]}: w = d * q, q uniform over -128..127 (std 73.9).
        raw[:, 0:2] = f16_bytes(np, jitter * (WEIGHT_STD / 73.9))
    elif kind == "q4_k":
        # block_q4_K {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: w = d*sc*q - dmin*m per
        # 32-weight sub-block. With m = sc and dmin = 7.5 d, w = d*sc*(q - 7.5): centred,
        # std d * sc * 4.61, sc uniform over 32..63 (mean 47.5).
        d = (jitter * (WEIGHT_STD / (47.5 * 4.61))).astype(np.float16)
        raw[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
        raw[:, 2:4] = f16_bytes(np, d.astype(np.float32) * 7.5)
        sc = rng.integers(32, 64, (n_blocks, 8), dtype=np.uint8)
        m = sc
        # get_scale_min_k4's packing: j < 4 in the low six bits of bytes j (sc) and j+4 (m);
        # j >= 4 split between the nibbles of byte j+4 and the top two bits of bytes j-4 / j.
        raw[:, 4:8] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
        raw[:, 8:12] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
        raw[:, 12:16] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    elif kind == "q6_k":
        # block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: w = d * scale * (q - 32),
        # q over 0..63 (std 18.5); scales of magnitude 4..15, random sign (rms 10.1).
        mag = rng.integers(4, 16, (n_blocks, 16), dtype=np.int8)
        sign = np.where(rng.integers(0, 2, (n_blocks, 16)) == 0, -1, 1).astype(np.int8)
        raw[:, 192:208] = (mag * sign).view(np.uint8)
        raw[:, 208:210] = f16_bytes(np, jitter * (WEIGHT_STD / (10.1 * 18.5)))
    else:
        raise ValueError(kind)
    return raw


def llama3_rope_freqs(np, s):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors: one divisor per frequency."""
    r, base, dim = s["llama3_rope"], s["rope_theta"], s["head_dim"]
    low_wavelen = r["original"] / r["low_freq_factor"]
    high_wavelen = r["original"] / r["high_freq_factor"]
    factors = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * base ** (i / dim)
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(r["factor"])
        else:
            smooth = (r["original"] / wavelen - r["low_freq_factor"]) / (
                r["high_freq_factor"] - r["low_freq_factor"]
            )
            factors.append(1 / ((1 - smooth) / r["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def make_tensor(np, s, name, shape, kind, seed):
    if kind == "f32":
        return np.ones(shape, dtype=np.float32)
    if kind == "rope_freqs":
        return llama3_rope_freqs(np, s)
    rows, cols = shape
    size, per_block = BLOCK[kind]
    if cols % per_block:
        sys.exit(f"{name}: {cols} columns are not a multiple of {kind}'s {per_block}")
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return random_blocks(np, rng, kind, rows * cols // per_block).reshape(rows, cols // per_block * size)


def add_metadata(gguf, writer, s, layers, kind):
    writer.add_name(f"{s['name']}-shaped dummy (random weights, {kind}, {layers} layers)")
    writer.add_context_length(s["context_length"])
    writer.add_embedding_length(s["hidden_size"])
    writer.add_block_count(layers)
    writer.add_feed_forward_length(s["intermediate_size"])
    writer.add_head_count(s["num_heads"])
    writer.add_head_count_kv(s["num_kv_heads"])
    writer.add_key_length(s["head_dim"])
    writer.add_value_length(s["head_dim"])
    writer.add_rope_dimension_count(s["head_dim"])
    writer.add_rope_freq_base(s["rope_theta"])
    writer.add_layer_norm_rms_eps(s["rms_norm_eps"])
    writer.add_vocab_size(s["vocab_size"])
    file_type = {
        "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    }[kind]
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
    s = SHAPES[args.shape]
    layers = args.layers or s["num_layers"]
    suffix = (f"-{layers}l" if layers != s["num_layers"] else "") + (f"-seed{args.seed}" if args.seed else "")
    output = args.output or MODEL_DIR / f"{args.shape}-dummy-{args.type}{suffix}.gguf"
    if output.is_file() and not args.force:
        print(output)
        return
    gguf = import_gguf(args.gguf_py)
    import numpy as np

    if not args.tokenizer_from.is_file():
        sys.exit(f"no {args.tokenizer_from}: run scripts/fetch-model.sh or pass --tokenizer-from")
    output.parent.mkdir(parents=True, exist_ok=True)
    shape = dict(s, num_layers=layers)
    plan = list(tensor_plan(shape, args.type))

    tmp = str(output) + ".tmp"
    writer = gguf.GGUFWriter(tmp, s["arch"])
    add_metadata(gguf, writer, s, layers, args.type)
    n_tokens = copy_tokenizer(gguf, writer, args.tokenizer_from, s["vocab_size"])
    qtypes = {
        "q4_0": gguf.GGMLQuantizationType.Q4_0,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
        "q4_k": gguf.GGMLQuantizationType.Q4_K,
        "q6_k": gguf.GGMLQuantizationType.Q6_K,
    }
    # Declare every tensor first, then write them one at a time: only one is ever in memory.
    counts = {}
    for name, shp, kind in plan:
        counts[kind] = counts.get(kind, 0) + 1
        if kind in ("f32", "rope_freqs"):
            writer.add_tensor_info(name, shp, np.dtype(np.float32), 4 * math.prod(shp))
        else:
            rows, cols = shp
            size, per_block = BLOCK[kind]
            nbytes = rows * cols // per_block * size
            writer.add_tensor_info(
                name, (rows, cols // per_block * size), np.dtype(np.uint8), nbytes, raw_dtype=qtypes[kind]
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, shp, kind in plan:
        writer.write_tensor_data(make_tensor(np, s, name, shp, kind, args.seed))
    writer.close()
    os.replace(tmp, output)
    mix = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
    print(
        f"{args.shape} {args.type}, {layers} layers, seed {args.seed}: {mix}; {n_tokens} tokens "
        f"from {args.tokenizer_from.name} padded to {s['vocab_size']}, "
        f"{output.stat().st_size / 2**20:.0f} MiB",
        file=sys.stderr,
    )
    print(output)


if __name__ == "__main__":
    main()
