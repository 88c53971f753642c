#!/usr/bin/env python3
"""One user's decode on model `a` alone, then while model `b` prefills 2,000-token prompts back
to back, on a server of several models (docs/models.md, "Several models in one server").

    tokenmill serve --port 8000 --model a=M.gguf --model b=M.gguf --no-enable-prefix-caching
    scripts/several-models-fairness.py [http://127.0.0.1:8000]

Prints the time per output token (mean, median, max of the gaps between streamed chunks) of a
128-token greedy decode, twice alone, twice beside `b`'s prefills, once alone again. Prefix
caching must be off, or `b`'s repeated prompt is a cache hit and no prefill at all."""
import json, statistics, sys, threading, time, urllib.request

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
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


main()
