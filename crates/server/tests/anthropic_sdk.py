"""Drives a running tokenmill server with the official `anthropic` package.

Usage: python anthropic_sdk.py BASE_URL MODEL API_KEY
Exits 3 if `anthropic` cannot be imported, 1 on a failed check, 0 when every check passes.
"""

import sys

try:
    import anthropic
except ImportError as error:
    print(f"cannot import anthropic: {error}", file=sys.stderr)
    sys.exit(3)


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def main():
    base_url, model, key = sys.argv[1], sys.argv[2], sys.argv[3]
    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0)
    question = [{"role": "user", "content": "Name a fruit."}]

    message = client.messages.create(
        model=model, max_tokens=12, messages=question, system="Answer in one word.",
        metadata={"user_id": "test"}, extra_body={"temperature": 0},
    )
    check(message.type == "message" and message.role == "assistant", f"message: {message}")
    check(message.content and message.content[0].type == "text", f"content: {message.content}")
    check(message.content[0].text, "the message is empty")
    check(message.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {message.stop_reason}")
    check(0 < message.usage.output_tokens <= 12, f"usage {message.usage}")

    # Streamed, through the SDK's own event accumulator.
    with client.messages.stream(
        model=model, max_tokens=12, messages=question, system="Answer in one word.",
        extra_body={"temperature": 0},
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    check("".join(pieces) == message.content[0].text,
          f"streamed {pieces!r} vs {message.content[0].text!r}")
    check(final.stop_reason == message.stop_reason, f"final {final}")
    check(final.usage.output_tokens == message.usage.output_tokens, f"final usage {final.usage}")

    # A raw stream lists Anthropic's event types in order.
    kinds = [event.type for event in client.messages.create(
        model=model, max_tokens=4, messages=question, stream=True)]
    check(kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"],
          f"events {kinds}")

    # A tool round trip: a forced call, then its result in the next turn.
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = client.messages.create(
        model=model, max_tokens=40, messages=ask, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    )
    check(called.stop_reason == "tool_use", f"tool stop_reason {called.stop_reason}: {called}")
    uses = [b for b in called.content if b.type == "tool_use"]
    check(len(uses) >= 1 and uses[0].name == "get_weather", f"tool_use: {called.content}")
    check(isinstance(uses[0].input.get("city"), str), f"input {uses[0].input}")
    answered = client.messages.create(
        model=model, max_tokens=16, tools=[WEATHER],
        messages=ask + [
            {"role": "assistant", "content": called.content},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": uses[0].id, "content": "Sunny, 21 C"}]},
        ],
    )
    check(answered.stop_reason in ("end_turn", "max_tokens", "tool_use"), f"answer {answered}")

    # Streamed tool use: the accumulated input is the parsed object.
    with client.messages.stream(
        model=model, max_tokens=40, messages=ask, tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    ) as stream:
        final = stream.get_final_message()
    streamed_uses = [b for b in final.content if b.type == "tool_use"]
    check(streamed_uses and isinstance(streamed_uses[0].input, dict), f"streamed tool {final}")

    counted = client.messages.count_tokens(model=model, messages=question,
                                           system="Answer in one word.")
    check(counted.input_tokens == message.usage.input_tokens,
          f"count_tokens {counted} vs usage {message.usage}")

    # Typed errors.
    try:
        client.post("/v1/messages", body={"model": model, "messages": question},
                    cast_to=anthropic.types.Message)
        check(False, "a request without max_tokens was accepted")
    except anthropic.BadRequestError as error:
        check("max_tokens" in str(error), f"missing max_tokens: {error}")
    try:
        client.messages.create(model=model, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}]}])
        check(False, "an image was accepted")
    except anthropic.BadRequestError as error:
        check("image" in str(error), f"image: {error}")
    try:
        anthropic.Anthropic(base_url=base_url, api_key="wrong", max_retries=0).messages.create(
            model=model, max_tokens=4, messages=question)
        check(False, "a wrong x-api-key was accepted")
    except anthropic.AuthenticationError:
        pass
    try:
        client.messages.create(model="no-such-model", max_tokens=4, messages=question)
        check(False, "an unknown model was accepted")
    except anthropic.NotFoundError:
        pass
    print("ok")


main()
