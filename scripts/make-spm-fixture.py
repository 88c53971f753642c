#!/usr/bin/env python3
"""Writes the SentencePiece fixture of the server's `llama` tokenizer tests.

GGUF files of Llama 2, Mistral and their kin carry a SentencePiece BPE vocabulary as
`tokenizer.ggml.model = "llama"`: tokens, scores and token types, no merges. To hold our rebuild
of that tokenizer to SentencePiece itself, this script trains a tiny SentencePiece BPE model the
way Llama 2's was configured (byte fallback, identity normalization, extra whitespace kept, a
dummy prefix, digits split), stores it in a small GGUF of a tiny random Llama (so the server can
load and serve it), and records what SentencePiece's own encoder and decoder answer for a set of
strings chosen to reach every rule: leading, trailing and repeated spaces, newlines and tabs,
digits, punctuation, accents, scripts outside the training text, and emoji (byte fallback).

    python3 -m venv venv && venv/bin/pip install sentencepiece==0.2.3 gguf==0.19.0 numpy
    venv/bin/python scripts/make-spm-fixture.py crates/server/tests/fixtures/spm

writes `tiny-spm-llama.gguf` and `spm-cases.json` there. The run is deterministic (seeded text,
one training thread, seeded weights).
"""

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece as spm
from gguf import GGUFWriter, TokenType

VOCAB_SIZE = 1024
SEED = 8004

# A tiny Llama: one layer, one 32-wide head, tied embeddings, f16 weights. Only its shape
# matters: the tokenizer tests never look at what it generates.
HIDDEN = 32
HEADS = 1
FFN = 64
LAYERS = 1

WORDS = """the a an of to in is was for on that with as by at from it this be are or
not have has had but which one all their there were when we can been more if will would
who so out up about into than them some could other time only new these two may first
then do any like my now over such our man me even most made after also did many before
must through back years where much your way well down should because each just those
people how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us great
old year off come since against go came right used take three states himself few house
use during without again place around however home small found thought went say part
once general high upon school every number tokenizer river mountain garden window
letter engine server token stream sentence piece merge byte model""".split()
PUNCTUATION = [".", ",", "!", "?", ";", ":", "'", '"', "(", ")", "-"]

CASES = [
    "",
    "Hello",
    "Hello world",
    "hello world, how are you?",
    " leading space",
    "   three leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "double  space and   triple",
    " ",
    "    ",
    "line one\nline two",
    "\n\nblank lines\n\n",
    "tabs\tand\ttabs",
    "Mixed\n \t whitespace \n",
    "1234567890",
    "in 2024, 42 people paid $3.50 each",
    "3.14159 + 2.71828 = 5.85987",
    "Punctuation!?;:'\"()[]{}<>-_=+*&^%$#@~`|\\/",
    "UPPER CASE and lower case",
    "don't can't won't it's",
    "Crème brûlée à la française",
    "naïve café, résumé",
    "Ελληνικά και Русский",
    "東京タワーと你好世界",
    "emoji 🍮🎉 and 👩‍👩‍👧",
    "🙂",
    "a\u00a0non-breaking space",
    "the server streams each token of the model",
    "mountain river garden window letter engine",
    "▁already has the marker",
    "ends with newline\n",
    "x",
    "Zz",
]

def training_text(rng):
    """Seeded sentences over WORDS with digits, punctuation, a few accents and repeated spaces."""
    lines = []
    for _ in range(4000):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 99999)))
        if rng.random() < 0.1:
            words.insert(rng.randrange(len(words) + 1), rng.choice(["café", "déjà", "naïve", "über"]))
        sentence = " ".join(words)
        if rng.random() < 0.15:
            sentence = sentence.replace(" ", "  ", 1)
        if rng.random() < 0.5:
            sentence = sentence[0].upper() + sentence[1:]
        lines.append(sentence + rng.choice(PUNCTUATION))
        if rng.random() < 0.2:
            # Indented lines, so that runs of spaces become pieces of their own as in code-heavy vocabularies.
            lines.append(" " * rng.choice([2, 4, 4, 8]) + " ".join(rng.choice(WORDS) for _ in range(3)))
    return "\n".join(lines) + "\n"


def train(workdir, rng):
    corpus = workdir / "corpus.txt"
    corpus.write_text(training_text(rng), encoding="utf-8")
    prefix = workdir / "spm"
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        seed_sentencepiece_size=100000,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_file=str(prefix) + ".model")


def token_type(sp, i):
    if sp.is_unknown(i):
        return TokenType.UNKNOWN
    if sp.is_control(i):
        return TokenType.CONTROL
    if sp.is_byte(i):
        return TokenType.BYTE
    if sp.is_unused(i):
        return TokenType.UNUSED
    return TokenType.NORMAL


def write_gguf(sp, path, rng_np):
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("tiny-spm-llama")
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_block_count(LAYERS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(1)  # mostly F16

    n = sp.get_piece_size()
    writer.add_tokenizer_model("llama")
    writer.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(n)])
    writer.add_token_scores([float(sp.get_score(i)) for i in range(n)])
    writer.add_token_types([int(token_type(sp, i)) for i in range(n)])
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)

    def matrix(rows, cols):
        return (rng_np.standard_normal((rows, cols)) * 0.125).astype(np.float16)

    def norm(width):
        return rng_np.uniform(0.5, 1.5, width).astype(np.float32)

    writer.add_tensor("token_embd.weight", matrix(n, HIDDEN))
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", norm(HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_q.weight", matrix(HIDDEN, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_k.weight", matrix(HIDDEN, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_v.weight", matrix(HIDDEN, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_output.weight", matrix(HIDDEN, HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", norm(HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(FFN, HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", matrix(FFN, HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", matrix(HIDDEN, FFN))
    writer.add_tensor("output_norm.weight", norm(HIDDEN))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def decode_only_cases(sp):
    """Id sequences no encoding yields as a whole, where decoding has its own rules to get right."""
    emoji = sp.encode("🍮")
    word = sp.encode("the mountain river")
    hello = sp.encode("hello")
    return [
        {"why": "a multi-byte character cut after its first byte", "ids": emoji[:2]},
        {"why": "ids that start at a later word", "ids": word[1:]},
        {"why": "ids that start mid-word, without a marker", "ids": hello[1:]},
        {"why": "BOS and EOS around text", "ids": [sp.bos_id()] + word + [sp.eos_id()]},
        {"why": "a lone marker piece", "ids": [sp.piece_to_id("▁")]},
        {"why": "two marker pieces then a word", "ids": [sp.piece_to_id("▁")] * 2 + word},
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory() as tmp:
        sp = train(Path(tmp), random.Random(SEED))
    if sp.get_piece_size() != VOCAB_SIZE:
        sys.exit(f"trained {sp.get_piece_size()} pieces, expected {VOCAB_SIZE}")

    cases = []
    for text in CASES:
        ids = sp.encode(text)
        cases.append({
            "text": text,
            "ids": ids,
            "pieces": [sp.id_to_piece(i) for i in ids],
            "decoded": sp.decode(ids),
        })
    decodes = [dict(case, decoded=sp.decode(case["ids"])) for case in decode_only_cases(sp)]
    byte_fallback_ids = {i for i in range(sp.get_piece_size()) if sp.is_byte(i)}
    if not any(i in byte_fallback_ids for case in cases for i in case["ids"]):
        sys.exit("no case reaches byte fallback; the cases no longer test it")

    write_gguf(sp, args.out_dir / "tiny-spm-llama.gguf", np.random.default_rng(SEED))
    fixture = {
        "about": "SentencePiece's own encodings and decodings for the vocabulary in tiny-spm-llama.gguf; "
        "made by scripts/make-spm-fixture.py",
        "sentencepiece_version": spm.__version__,
        "bos_id": sp.bos_id(),
        "eos_id": sp.eos_id(),
        "unk_id": sp.unk_id(),
        "vocab_size": sp.get_piece_size(),
        "cases": cases,
        "decode_only": decodes,
    }
    (args.out_dir / "spm-cases.json").write_text(
        json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
