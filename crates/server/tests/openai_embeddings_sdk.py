"""Drives a running tokenmill server's /v1/embeddings with the official `openai` package.

Usage: python openai_embeddings_sdk.py BASE_URL MODEL HIDDEN_SIZE
Exits 3 if `openai` cannot be imported, 1 on a failed check, 0 when every check passes.
"""

import base64
import json
import math
import struct
import sys
import urllib.request

try:
    import openai
except ImportError as error:
    print(f"cannot import openai: {error}", file=sys.stderr)
    sys.exit(3)


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def as_f32(values):
    """The float32 each value stands for (a JSON float is the shortest text that rounds to it)."""
    return [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]


def tokenize(base_url, text):
    request = urllib.request.Request(
        f"{base_url}/tokenize",
        data=json.dumps({"prompt": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as reply:
        return json.load(reply)["tokens"]


def refused(client, model, param, **fields):
    try:
        client.embeddings.create(model=model, **fields)
    except openai.BadRequestError as error:
        check(error.status_code == 400, f"{fields}: status {error.status_code}")
        body = error.body or {}
        check(body.get("param") == param, f"{fields}: param {body.get('param')!r}, want {param!r}")
        return str(error)
    check(False, f"{fields} was accepted")


def main():
    base_url, model, hidden = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    text = "The quick brown fox jumps over the lazy dog."

    # The package asks for base64 unless told otherwise, and decodes it.
    default = client.embeddings.create(model=model, input=text)
    check(default.object == "list" and default.model == model, f"reply: {default}")
    check(len(default.data) == 1 and default.data[0].index == 0, f"data: {default.data}")
    vector = default.data[0].embedding
    check(len(vector) == hidden, f"{len(vector)} values, want the hidden size {hidden}")
    check(abs(math.sqrt(sum(v * v for v in vector)) - 1) < 1e-5, "not unit length")
    ids = tokenize(base_url, text)
    usage = default.usage
    check(usage.prompt_tokens == len(ids) == usage.total_tokens, f"usage {usage}, {len(ids)} ids")

    floats = client.embeddings.create(model=model, input=text, encoding_format="float")
    check(as_f32(floats.data[0].embedding) == as_f32(vector), "float and base64 differ")
    # Asked for by name, base64 comes back as the string: little-endian float32 bytes.
    explicit = client.embeddings.create(model=model, input=text, encoding_format="base64")
    raw = base64.b64decode(explicit.data[0].embedding)
    check(list(struct.unpack(f"<{hidden}f", raw)) == vector, "base64 bytes differ")

    # Token ids: the text's own ids give its vector, to the bit.
    by_ids = client.embeddings.create(model=model, input=ids, encoding_format="float")
    check(as_f32(by_ids.data[0].embedding) == as_f32(vector), "token-id input differs from its text")

    # Several inputs in one request: one vector each, in order, each as it is alone.
    many = client.embeddings.create(model=model, input=["A red apple.", text, "Seven."])
    check([d.index for d in many.data] == [0, 1, 2], f"indices {[d.index for d in many.data]}")
    check(many.data[1].embedding == vector, "a batched input differs from the same input alone")
    check(many.data[0].embedding != many.data[2].embedding, "different inputs, same vector")
    lists = client.embeddings.create(model=model, input=[ids, ids[:3]])
    check(len(lists.data) == 2 and lists.data[0].embedding == vector, "token-id lists")
    check(lists.usage.prompt_tokens == len(ids) + 3, f"usage {lists.usage}")

    message = refused(client, model, "dimensions", input=text, dimensions=8)
    check("Matryoshka" in message, f"dimensions refusal: {message}")
    full = client.embeddings.create(model=model, input=text, dimensions=hidden)
    check(full.data[0].embedding == vector, "dimensions = the hidden size changes the vector")
    refused(client, model, "input", input="")
    refused(client, model, "input", input=[])
    refused(client, model, "input", input=[[]])
    refused(client, model, "encoding_format", input=text, encoding_format="int8")
    refused(client, model, "truncate_prompt_tokens", input=text, extra_body={"truncate_prompt_tokens": 4})
    try:
        client.embeddings.create(model="no-such-model", input=text)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError:
        pass
    print("ok")


if __name__ == "__main__":
    main()
