#!/usr/bin/env python3
"""One user's decode on model `a` alone, then while model `b` prefills 2,000-token prompts back
to back, on a server of several models (docs/models.md, "Several models in one server").

    tokenmill serve --port 8000 --model a=M.gguf --model b=M.gguf --no-enable-prefix-caching
    scripts/several-models-fairness.py [http://127.0.0.1:8000] [--prefill-cost]

Prints the time per output token (mean, median, max of the gaps between streamed chunks) of a
128-token greedy decode, twice alone, twice beside `b`'s prefills, once alone again. Prefix
caching must be off, or `b`'s repeated prompt is a cache hit and no prefill at all.

With --prefill-cost, the other side instead: the seconds of one 2,000-token prefill on `b`,
twice alone and twice while `a` decodes 128-token replies back to back."""
import json, statistics, sys, threading, time, urllib.request

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
URL = ARGS[0] if ARGS else "http://127.0.0.1:8000"
LONG_PROMPT = "hello " * 2000


def post(body):
    request = urllib.request.Request(URL + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    return urllib.request.urlopen(request, timeout=600)


def decode_a():
    body = {"model": "a", "prompt": "Once upon a time", "max_tokens": 128, "ignore_eos": True,
            "stream": True, "temperature": 0}
    times = []
    with post(body) as reply:
        for line in reply:
            if line.startswith(b"data: {"):
                times.append(time.perf_counter())
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.mean(gaps) * 1e3, statistics.median(gaps) * 1e3, max(gaps) * 1e3


def prefill_b():
    started = time.perf_counter()
    with post({"model": "b", "prompt": LONG_PROMPT, "max_tokens": 1}) as reply:
        reply.read()
    return time.perf_counter() - started


def prefill_cost():
    post({"model": "a", "prompt": "x", "max_tokens": 1}).read()
    post({"model": "b", "prompt": "x", "max_tokens": 1}).read()
    alone = [prefill_b() for _ in range(2)]
    stop = threading.Event()

    def decode():
        while not stop.is_set():
            decode_a()

    thread = threading.Thread(target=decode)
    thread.start()
    time.sleep(0.5)
    beside = [prefill_b() for _ in range(2)]
    stop.set()
    thread.join()
    print("b's 2,000-token prefill, s: alone %s, beside a's decodes %s"
          % (", ".join("%.2f" % t for t in alone), ", ".join("%.2f" % t for t in beside)))


def main():
    stop = threading.Event()
    prefills = [0]

    def prefill_b():
        while not stop.is_set():
            with post({"model": "b", "prompt": LONG_PROMPT, "max_tokens": 1}) as reply:
                reply.read()
            prefills[0] += 1

    # Both loaded before anything is timed.
    post({"model": "a", "prompt": "x", "max_tokens": 1}).read()
    post({"model": "b", "prompt": "x", "max_tokens": 1}).read()
    # Untimed: a freshly loaded model backs its KV pages in its first idle moments, which
    # slowed the first decodes two- to threefold (13-17 ms against 5 ms later) and made the
    # prefill look free beside them.
    decode_a()
    line = "%-22s TPOT ms mean %.2f median %.2f max %.2f"
    for _ in range(2):
        print(line % (("alone",) + decode_a()))
    thread = threading.Thread(target=prefill_b)
    thread.start()
    time.sleep(0.5)
    for _ in range(2):
        print(line % (("beside b's prefill",) + decode_a()))
    stop.set()
    thread.join()
    print("b's 2,000-token prefills finished meanwhile:", prefills[0])
    print(line % (("alone again",) + decode_a()))


if "--prefill-cost" in sys.argv[1:]:
    prefill_cost()
else:
    main()
