"""Drives a running tokenmill server's /v1/responses with the official `openai` package.

Usage: python openai_responses_sdk.py BASE_URL MODEL STORED
STORED is the server's --max-stored-responses. Exits 3 if `openai` (or pydantic) cannot be
imported, 1 on a failed check, 0 when every check passes.
"""

import json
import sys

try:
    import openai
    from pydantic import BaseModel, Field
except ImportError as error:
    print(f"cannot import openai: {error}", file=sys.stderr)
    sys.exit(3)


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


def main():
    base_url, model, stored = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)

    # Plain: a string input, instructions, max_output_tokens.
    plain = client.responses.create(
        model=model,
        instructions="Answer briefly.",
        input="Name a fruit.",
        max_output_tokens=16,
        temperature=0,
    )
    check(plain.object == "response" and plain.id.startswith("resp_"), f"plain: {plain}")
    check(plain.status in ("completed", "incomplete"), f"plain status {plain.status}")
    check(plain.output_text, f"plain response has no text: {plain}")
    check(0 < plain.usage.output_tokens <= 16, f"plain usage {plain.usage}")

    # Streamed with `create(stream=True)`: the events, in order, build the same text.
    events = list(
        client.responses.create(
            model=model, input="Name a fruit.", max_output_tokens=16, temperature=0,
            instructions="Answer briefly.", stream=True,
        )
    )
    types = [e.type for e in events]
    check(types[:2] == ["response.created", "response.in_progress"], f"stream opens {types}")
    check(types[-1] in ("response.completed", "response.incomplete"), f"stream ends {types}")
    check("response.output_item.added" in types and "response.content_part.added" in types,
          f"stream items {types}")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    check(text == plain.output_text, f"streamed {text!r} != {plain.output_text!r}")
    check([e.sequence_number for e in events] == list(range(len(events))), "sequence numbers")

    # `responses.stream` with a Pydantic `text_format`: the schema holds the reply, which
    # ends when the object does, so the stream completes and parses.
    with client.responses.stream(
        model=model, input="Invent a person.", text_format=Person,
        max_output_tokens=60, temperature=0,
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    check(final.status == "completed", f"structured stream: {final}")
    check(isinstance(final.output_parsed, Person), f"output_parsed {final.output_parsed!r}")
    check("".join(deltas) == final.output_text, "structured deltas")
    parsed = client.responses.parse(
        model=model, input="Invent a person.", text_format=Person,
        max_output_tokens=60, temperature=0,
    )
    check(parsed.output_parsed == final.output_parsed, f"parse {parsed.output_parsed!r}")

    # A function tool round trip: the call, then its output against the stored response.
    called = client.responses.create(
        model=model, input="What is the weather in Paris?", tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False, max_output_tokens=40, temperature=0,
    )
    calls = [item for item in called.output if item.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather", f"calls: {called.output}")
    arguments = json.loads(calls[0].arguments)
    check(isinstance(arguments.get("city"), str), f"arguments {arguments}")
    result = {"type": "function_call_output", "call_id": calls[0].call_id,
              "output": json.dumps({"sky": "sunny", "celsius": 21})}
    answered = client.responses.create(
        model=model, previous_response_id=called.id, input=[result], tools=[WEATHER],
        max_output_tokens=16, temperature=0,
    )
    check(answered.previous_response_id == called.id, f"answered: {answered}")
    check(answered.status in ("completed", "incomplete"), f"answered: {answered}")
    # Its input items: the whole conversation it continued, newest first by default.
    listed = client.responses.input_items.list(answered.id)
    check([item.type for item in listed.data]
          == ["function_call_output", "function_call", "message"], f"input items {listed}")
    check(listed.data[0].call_id == calls[0].call_id, f"input items {listed.data[0]}")
    oldest_first = client.responses.input_items.list(answered.id, order="asc", limit=1)
    check(len(oldest_first.data) == 1 and oldest_first.has_more
          and oldest_first.data[0].content[0].text == "What is the weather in Paris?",
          f"input items asc {oldest_first}")
    # The same turn with the whole conversation sent as input, the SDK's items passed back.
    whole = client.responses.create(
        model=model,
        input=[{"role": "user", "content": "What is the weather in Paris?"}, *called.output, result],
        tools=[WEATHER], max_output_tokens=16, temperature=0, store=False,
    )
    check(whole.output_text == answered.output_text,
          f"whole {whole.output_text!r} != chained {answered.output_text!r}")
    check(whole.store is False, f"store: {whole.store}")

    # Streamed function call arguments.
    with client.responses.stream(
        model=model, input="What is the weather in Rome?", tools=[WEATHER],
        tool_choice="required", parallel_tool_calls=False, max_output_tokens=40,
        temperature=0,
    ) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    check("response.function_call_arguments.delta" in kinds
          and "response.function_call_arguments.done" in kinds, f"call stream {kinds}")
    check(final.output[-1].type == "function_call", f"call stream output {final.output}")

    # Store: retrieve, delete, then missing.
    kept = client.responses.create(
        model=model, input="Name a fruit.", max_output_tokens=8, metadata={"run": "sdk"},
    )
    got = client.responses.retrieve(kept.id)
    check(got.id == kept.id and got.output_text == kept.output_text, f"retrieved {got}")
    check(got.metadata == {"run": "sdk"}, f"metadata {got.metadata}")
    client.responses.delete(kept.id)
    try:
        client.responses.retrieve(kept.id)
        check(False, "a deleted response was retrieved")
    except openai.NotFoundError:
        pass

    # Eviction: `stored` newer responses push `oldest` out.
    oldest = client.responses.create(model=model, input="Hi", max_output_tokens=1)
    for _ in range(stored):
        client.responses.create(model=model, input="Hi", max_output_tokens=1)
    try:
        client.responses.retrieve(oldest.id)
        check(False, "an evicted response was retrieved")
    except openai.NotFoundError as error:
        check("evicted" in str(error), f"evicted: {error}")
    try:
        client.responses.create(model=model, input="Hi", previous_response_id=oldest.id)
        check(False, "an evicted previous_response_id was accepted")
    except openai.NotFoundError:
        pass

    # A field not honoured is a 400 naming it.
    try:
        client.responses.create(model=model, input="Hi", reasoning={"effort": "high"})
        check(False, "reasoning.effort was accepted")
    except openai.BadRequestError as error:
        check(error.body.get("param") == "reasoning.effort", f"refusal: {error.body}")

    print(plain.output_text)
    print(final.output[-1].arguments)


if __name__ == "__main__":
    main()
