"""Drives a running tokenmill server with the official `openai` package.

Usage: python openai_sdk.py BASE_URL MODEL
Exits 3 if `openai` cannot be imported, 1 on a failed check, 0 when every check passes.
"""

import sys

try:
    import openai
except ImportError as error:
    print(f"cannot import openai: {error}", file=sys.stderr)
    sys.exit(3)


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def main():
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)

    models = client.models.list()
    check([m.id for m in models.data] == [model], f"models: {models}")

    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a fruit."}],
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    check(pieces, "the chat stream carried no content")
    check(finish in ("stop", "length"), f"chat finish_reason {finish!r}")
    check(usage is not None and 0 < usage.completion_tokens <= 12, f"chat usage {usage}")

    completion = client.completions.create(
        model=model, prompt="The sky is", max_tokens=8, temperature=0
    )
    check(len(completion.choices) == 1, f"completion: {completion}")
    check(completion.choices[0].text, "the completion is empty")
    check(completion.usage.completion_tokens > 0, f"completion usage {completion.usage}")

    try:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError:
        pass

    print("".join(pieces))
    print(completion.choices[0].text)


if __name__ == "__main__":
    main()
