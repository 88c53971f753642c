#!/usr/bin/env python3
"""Writes the Gemma 3 tokenization fixture: llama.cpp's own ids for varied text on the real file.

Gemma's GGUF carries a SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`) of 262,144
pieces: scores, token types (normal, control, user-defined, byte), byte fallback, no dummy
prefix, user-defined runs of spaces and newlines and HTML tags, and control tokens such as
`<start_of_turn>`. To hold our rebuild of it to llama.cpp, this script starts llama-server on
gemma-3-270m-q4_k_m.gguf (scripts/fetch-gemma3.sh) and records its `/tokenize` answer for each
text below, with and without special tokens (BOS). It writes only llama.cpp's ids; two more
references can be asked to report every text on which they disagree with it:

- `--check-sentencepiece`: SentencePiece itself, on a model proto rebuilt from the GGUF's pieces,
  scores and types (identity normalization, no dummy prefix, byte fallback). SentencePiece never
  reads control tokens in text, so it differs on the texts that contain them, and only there.
- `--check-hf`: transformers' tokenizer built from the same GGUF. On 2026-12-04 (transformers
  5.25.0) it differed only on runs of more than 31 spaces, which it splits into 16- and 24-space
  pieces where llama.cpp and SentencePiece take the 31-space user-defined piece first.

    scripts/build-llama-server.sh                 # llama-server from the pinned sdist
    venv/bin/python scripts/make-gemma3-tokenize-fixture.py \\
        --llama-server ~/.cache/tokenmill/llama.cpp/0.3.36/build/bin/llama-server \\
        --model "$(scripts/fetch-gemma3.sh)" \\
        --llama-cpp-version "llama.cpp vendored by llama-cpp-python 0.3.36" \\
        --out crates/server/tests/fixtures/gemma3/tokenize-cases.json

Only the standard library is needed without the checks; they need gguf, sentencepiece and
protobuf, and transformers for `--check-hf` (torch is not needed, see `hf_tokenizer`).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CASES = [
    # Plain English, leading/trailing/inner spaces: no dummy prefix, so a leading space is a piece.
    "",
    "Hello",
    "Hello world",
    " Hello world",
    "Hello world ",
    "The quick brown fox jumps over the lazy dog.",
    "hello, World! How are you? I'm fine -- thanks.",
    # Runs of spaces, tabs and newlines: user-defined pieces, matched whole before BPE.
    "a  b",
    "a   b    c     d",
    "x" + " " * 31 + "y",
    "x" + " " * 32 + "y",
    "x" + " " * 40 + "y",
    " " * 70,
    "   leading spaces",
    "trailing spaces   ",
    "\n",
    "line one\nline two\n\nline four\n\n\n\nline eight",
    "\n" * 35,
    "tab\tseparated\t\tvalues",
    "\t\t\t",
    "windows\r\nline\r\nendings",
    " \n \n  \n\t \n",
    "mixed \t \n whitespace \u00a0 nbsp",
    # Digits: Gemma splits every digit.
    "1234567890",
    "Pi is 3.14159265358979, e is 2.71828; 1,000,000 and 007.",
    "2026-12-04T22:45:00Z",
    "١٢٣ ٤٥٦ and ０１２",
    # Languages and scripts.
    "Grüße aus München, straße, Ärger, Öl",
    "Ça va? L'été à Paris était très chaud, n'est-ce pas?",
    "¿Dónde está la biblioteca? Mañana.",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "你好，世界！今天天气很好。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 텍스트입니다.",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "สวัสดีชาวโลก",
    "Xin chào thế giới, tiếng Việt có dấu.",
    "Türkçe: ığüşöç İstanbul",
    "e\u0301 versus \u00e9 (combining acute versus precomposed)",
    # Code.
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n\tlet v: Vec<u32> = (0..10).map(|x| x * x).collect();\n\tprintln!(\"{v:?}\");\n}",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<table><tr><td>cell</td></tr></table>",
    "<h1>Title</h1>\n<p>Paragraph with <b>bold</b> and <i>italic</i>.</p>",
    "https://example.com/path?query=1&b=two#frag",
    "$ ls -la ~/.cache | grep -v '^d' > out.txt 2>&1",
    # Emoji: single code points, skin tones, ZWJ families, flags, keycaps.
    "😀 emoji",
    "🎉🎉🎉 party",
    "👍🏽 thumbs",
    "👨‍👩‍👧‍👦 family",
    "🇯🇵🇫🇷 flags",
    "1️⃣ keycap",
    # Rare characters: byte fallback.
    "\ue000\U0001f9ff\U00020000 rare",
    "\u200b zero width \ufeff bom",
    "\u0000 nul \u0007 bell",
    # Special tokens: control pieces match whole in text, as llama-server parses them.
    "<start_of_turn>user\nWrite a haiku.<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after bos",
    "text<eos>",
    "<start_of_turn><end_of_turn>",
    "<unused0> and <mask>",
    "not special: <start_of_turn, start_of_turn>, <bos",
    # Mixed.
    "English, 日本語, العربية, हिन्दी and 😀 in one line:\n\tcode = `x  +  1`;  // 42",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def start_llama_server(binary, model, port):
    process = subprocess.Popen(
        [binary, "--model", model, "--port", str(port), "--host", "127.0.0.1", "-c", "512", "-t", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"llama-server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
                if reply.status == 200:
                    return process
        except OSError:
            pass
        time.sleep(1)
    process.kill()
    sys.exit("llama-server did not become healthy within 300 s")


def hf_tokenizer(model):
    """transformers' tokenizer built from the GGUF's metadata.

    transformers reads GGUF headers in a module that imports torch for tensor dtypes, and gates
    the metadata-only path on torch being installed, though building a tokenizer touches no
    tensor. Where torch is absent, a placeholder module stands in for it so the tokenizer can be
    built without the multi-gigabyte install.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        import importlib.machinery
        import types

        class Placeholder:
            def __init__(self, *args, **kwargs):
                pass

            def __call__(self, *args, **kwargs):
                if len(args) == 1 and callable(args[0]) and not kwargs:
                    return args[0]  # `@torch.no_grad()` as a decorator that changes nothing
                return Placeholder()

            def __getattr__(self, name):
                return Placeholder()

            def __or__(self, other):
                return Placeholder()

            __ror__ = __or__

            def __getitem__(self, key):
                return Placeholder()

        stub = types.ModuleType("torch")
        stub.__spec__ = importlib.machinery.ModuleSpec("torch", None)
        stub.__getattr__ = lambda name: Placeholder
        sys.modules["torch"] = stub
        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        gguf_utils.is_torch_available = lambda: True
    from transformers import AutoTokenizer

    model = Path(model).resolve()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return AutoTokenizer.from_pretrained(str(model.parent), gguf_file=model.name)


def sentencepiece_processor(model):
    """SentencePiece's own encoder for the GGUF's vocabulary, its model proto rebuilt piece by piece."""
    import gguf
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    fields = gguf.GGUFReader(model).fields

    def array(key, read):
        field = fields[key]
        return [read(field.parts[i]) for i in field.data]

    def scalar(key):
        field = fields[key]
        return field.parts[field.data[0]][0]

    tokens = array("tokenizer.ggml.tokens", lambda part: bytes(part).decode())
    types = array("tokenizer.ggml.token_type", lambda part: int(part[0]))
    scores = array("tokenizer.ggml.scores", lambda part: float(part[0]))
    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    proto.trainer_spec.byte_fallback = True
    proto.trainer_spec.unk_id = int(scalar("tokenizer.ggml.unknown_token_id"))
    proto.trainer_spec.bos_id = int(scalar("tokenizer.ggml.bos_token_id"))
    proto.trainer_spec.eos_id = int(scalar("tokenizer.ggml.eos_token_id"))
    proto.trainer_spec.pad_id = int(scalar("tokenizer.ggml.padding_token_id"))
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = bool(scalar("tokenizer.ggml.add_space_prefix"))
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    kind = pb.ModelProto.SentencePiece
    # GGUF token types number SentencePiece's piece types from 1.
    kinds = {1: kind.NORMAL, 2: kind.UNKNOWN, 3: kind.CONTROL, 4: kind.USER_DEFINED, 5: kind.UNUSED, 6: kind.BYTE}
    for token, token_type, score in zip(tokens, types, scores):
        piece = proto.pieces.add()
        # llama.cpp's converter writes user-defined pieces with plain spaces; SentencePiece's have U+2581.
        piece.piece = token.replace(" ", "\u2581") if token_type == 4 else token
        piece.score = score
        piece.type = kinds[token_type]
    return spm.SentencePieceProcessor(model_proto=proto.SerializeToString())


def report(name, cases, encode):
    """Prints every encoding (without special tokens) where `encode` differs from llama.cpp."""
    wrong = [case for case in cases if encode(case["text"]) != case["ids"]]
    print(f"{name}: {len(wrong)} of {len(cases)} texts differ from llama.cpp", file=sys.stderr)
    for case in wrong:
        print(json.dumps({"text": case["text"], "llama_cpp": case["ids"], name: encode(case["text"])},
                         ensure_ascii=False), file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--llama-cpp-version", required=True,
                        help="where the llama.cpp came from; the binary's own --version is added")
    parser.add_argument("--out", required=True)
    parser.add_argument("--check-hf", action="store_true")
    parser.add_argument("--check-sentencepiece", action="store_true")
    args = parser.parse_args()

    built = subprocess.run([args.llama_server, "--version"], capture_output=True, text=True)
    version_line = next((line for line in (built.stdout + built.stderr).splitlines()
                         if line.startswith("version:")), "version: unknown")
    port = free_port()
    server = start_llama_server(args.llama_server, args.model, port)
    try:
        cases = []
        for text in CASES:
            ids = {}
            for add_special in (False, True):
                reply = post(
                    f"http://127.0.0.1:{port}/tokenize",
                    {"content": text, "add_special": add_special, "parse_special": True},
                )
                ids[add_special] = reply["tokens"]
            cases.append({"text": text, "ids": ids[False], "ids_with_special": ids[True]})
    finally:
        server.terminate()
        server.wait()

    if args.check_sentencepiece:
        import sentencepiece

        processor = sentencepiece_processor(args.model)
        report(f"sentencepiece {sentencepiece.__version__}", cases, processor.encode)
    if args.check_hf:
        import transformers

        hf = hf_tokenizer(args.model)
        report(f"transformers {transformers.__version__}", cases,
               lambda text: hf(text, add_special_tokens=False)["input_ids"])

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fixture = {
        "source": f"llama-server /tokenize ({args.llama_cpp_version}, {version_line}) "
                  f"on {Path(args.model).name}, "
                  "\"parse_special\": true; made by scripts/make-gemma3-tokenize-fixture.py",
        "model_file": Path(args.model).name,
        "cases": cases,
    }
    # One case a line, so a change to the ids shows as a change to its text's line.
    lines = [json.dumps(case, ensure_ascii=False) for case in cases]
    head = json.dumps({k: v for k, v in fixture.items() if k != "cases"}, ensure_ascii=False, indent=1)
    out.write_text(head[:-2] + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")
    print(f"wrote {len(cases)} cases to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
