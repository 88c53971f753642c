"""Drives a running tokenmill server with the official `openai` package.

Usage: python openai_sdk.py BASE_URL MODEL
Exits 3 if `openai` cannot be imported, 1 on a failed check, 0 when every check passes.
"""

import json
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

    weather = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    }
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": weather}},
        {"type": "function", "function": {"name": "get_time", "parameters": {
            "type": "object", "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"], "additionalProperties": False}}},
    ]
    called = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=0,
    )
    message = called.choices[0].message
    check(called.choices[0].finish_reason == "tool_calls", f"tool call reply: {called}")
    check(message.tool_calls and len(message.tool_calls) == 1, f"tool_calls: {message}")
    call = message.tool_calls[0]
    check(call.id.startswith("call_") and call.type == "function", f"tool call: {call}")
    arguments = json.loads(call.function.arguments)
    check(call.function.name in ("get_weather", "get_time"), f"called {call.function.name}")
    schema = weather if call.function.name == "get_weather" else tools[1]["function"]["parameters"]
    check(set(arguments) == set(schema["required"]), f"arguments {arguments}")
    check(all(isinstance(v, str) for v in arguments.values()), f"arguments {arguments}")
    if call.function.name == "get_weather":
        check(arguments["unit"] in ("celsius", "fahrenheit"), f"arguments {arguments}")
        check(len(arguments["city"]) <= 20, f"arguments {arguments}")

    print("".join(pieces))
    print(completion.choices[0].text)


if __name__ == "__main__":
    main()
