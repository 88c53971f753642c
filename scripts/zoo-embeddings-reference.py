#!/usr/bin/env python3
"""Writes crates/engine/tests/zoo_embeddings.json: for every model of the zoo
(../shared/golden/zoo, see its README) and each of its four reference prompts, the
embedding Hugging Face transformers gives: the base model's `last_hidden_state` (after the
final norm), pooled over the prompt's positions (the last one, and the mean of all), then
L2-normalized. The engine's embedding tests hold its `/v1/embeddings` path to these.

The model runs as the zoo's references do: transformers' own modelling code, float32 weights,
eager attention (and eager MoE experts), CPU, one thread, no KV cache. Pooling and the norm
are done in float64 from those float32 states; values are rounded to 9 significant digits.

    python3 -m venv venv && venv/bin/pip install torch==2.15.0 transformers==5.24.0 \\
        safetensors==0.8.0 numpy==2.4.6
    venv/bin/python scripts/zoo-embeddings-reference.py [ZOO_DIR] [OUT_JSON]
"""

import json
import os
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "..", "..", "shared", "golden", "zoo")
OUT = os.path.join(HERE, "..", "crates", "engine", "tests", "zoo_embeddings.json")
MODELS = ["tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-qwen3-moe", "tiny-gemma3"]


def f9(x):
    return float(f"{float(x):.9g}")


def unit(v):
    return v / torch.linalg.vector_norm(v)


def load(directory):
    config = json.load(open(os.path.join(directory, "config.json")))
    kwargs = dict(attn_implementation="eager", dtype=torch.float32)
    if "Moe" in config["architectures"][0]:
        kwargs["experts_implementation"] = "eager"
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, **kwargs).eval()
    assert model.config._attn_implementation == "eager"
    return model


@torch.no_grad()
def embeddings(model, ids):
    """The last-token and mean pools of the final-norm hidden states of `ids`."""
    out = model.base_model(torch.tensor([ids], dtype=torch.long), use_cache=False)
    states = out.last_hidden_state[0].to(torch.float64)  # [T, hidden], computed in float32
    return unit(states[-1]), unit(states.mean(dim=0))


def main():
    zoo = sys.argv[1] if len(sys.argv) > 1 else ZOO
    out = sys.argv[2] if len(sys.argv) > 2 else OUT
    torch.set_num_threads(1)
    fixture = {
        "meta": {
            "made_by": "scripts/zoo-embeddings-reference.py",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "what": "per model and reference case: the base model's last_hidden_state (after the "
            "final norm, float32 eager CPU, no KV cache), pooled in float64 over the prompt's "
            "positions (last: the last position; mean: all of them), L2-normalized; 9 significant digits",
        },
        "models": {},
    }
    for name in MODELS:
        directory = os.path.join(zoo, name)
        reference = json.load(open(os.path.join(directory, "reference.json")))
        model = load(directory)
        cases = {}
        for case in reference["cases"]:
            last, mean = embeddings(model, case["prompt_ids"])
            cases[case["name"]] = {
                "prompt_ids": case["prompt_ids"],
                "last": [f9(v) for v in last],
                "mean": [f9(v) for v in mean],
            }
        fixture["models"][name] = cases
        print(f"{name}: {len(cases)} cases, hidden {len(last)}")
    with open(out, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
