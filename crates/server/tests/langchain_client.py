"""Drives a running tokenmill server with LangChain's OpenAI client (`langchain-openai`).

Usage: python langchain_client.py BASE_URL MODEL
Exits 3 if `langchain_openai` cannot be imported, 1 on a failed check, 0 when every check passes.
"""

import sys

try:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel
except ImportError as error:
    print(f"cannot import langchain_openai: {error}", file=sys.stderr)
    sys.exit(3)


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


BASE, MODEL = sys.argv[1], sys.argv[2]


def chat(**extra):
    settings = {"max_tokens": 24, "temperature": 0, **extra}
    return ChatOpenAI(base_url=f"{BASE}/v1", api_key="unused", model=MODEL, **settings)


# Chat Completions: a plain call and a stream give the same greedy text.
plain = chat().invoke("Name a fruit.").content
check(isinstance(plain, str) and plain, f"invoke gave {plain!r}")
streamed = "".join(chunk.content for chunk in chat().stream("Name a fruit."))
check(streamed == plain, f"stream gave {streamed!r}, invoke {plain!r}")


# Structured output through a JSON schema.
class Fruit(BaseModel):
    name: str


fruit = chat().with_structured_output(Fruit, method="json_schema").invoke("Name a fruit.")
check(isinstance(fruit, Fruit) and fruit.name, f"structured output gave {fruit!r}")


# A forced tool call comes back as LangChain's tool_calls with parsed arguments.
@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return "sunny"


called = chat(max_tokens=64).bind_tools([get_weather], tool_choice="get_weather").invoke(
    "What is the weather in Paris?")
check(called.tool_calls and called.tool_calls[0]["name"] == "get_weather"
      and isinstance(called.tool_calls[0]["args"].get("city"), str),
      f"tool call gave {called.tool_calls!r}")

# The Responses API, as `use_responses_api=True` speaks it.
answer = chat(use_responses_api=True).invoke("Name a fruit.")
text = str(answer.text)
check(text == plain, f"responses API gave {text!r}, chat {plain!r}")
print("ok")
