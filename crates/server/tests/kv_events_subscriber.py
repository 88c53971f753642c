"""A KV-cache event subscriber written against pyzmq and msgpack alone, as a router would be.

Usage: kv_events_subscriber.py BASE_URL PUB_ENDPOINT REPLAY_ENDPOINT TOPIC

It subscribes, sends shared-prefix completions (and long one-off prompts, so the small KV pool
evicts), then asks the replay socket for everything from sequence 0 (the startup batch came
before it subscribed), applies every batch in sequence order, strictly (a stored block must be
new, a removed one known), and compares the block set it rebuilt with the server's
`/debug/prefix_cache`. Exit 0: identical; 1: a mismatch (printed); 3: pyzmq or msgpack missing.
"""

import json
import sys
import time
import urllib.request

try:
    import msgpack
    import zmq
except ImportError as error:
    print(f"cannot import pyzmq/msgpack: {error}", file=sys.stderr)
    sys.exit(3)

END_OF_REPLAY = (-1).to_bytes(8, "big", signed=True)


def fail(message):
    print(f"FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def post(base, path, body):
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as reply:
        return json.loads(reply.read())


class Mirror:
    """The block set a subscriber rebuilds: parent and tokens by block hash."""

    def __init__(self):
        self.blocks = {}
        self.stored = 0
        self.removed = 0
        self.cleared = 0

    def apply(self, payload):
        batch = msgpack.unpackb(payload)
        # KVEventBatch, array_like: [ts, events, data_parallel_rank]
        if not (isinstance(batch, list) and len(batch) == 3):
            fail(f"a batch is not [ts, events, data_parallel_rank]: {batch!r}")
        ts, events, rank = batch
        if not isinstance(ts, float) or not isinstance(events, list) or rank not in (0, None):
            fail(f"bad batch fields: ts {ts!r}, rank {rank!r}")
        if abs(ts - time.time()) > 600:
            fail(f"ts {ts} is not the current Unix time")
        for event in events:
            tag = event[0]
            if tag == "BlockStored":
                if len(event) != 7:
                    fail(f"BlockStored has {len(event)} fields: {event!r}")
                _, hashes, parent, tokens, block_size, lora_id, medium = event
                if lora_id is not None or medium != "GPU":
                    fail(f"lora_id {lora_id!r}, medium {medium!r}")
                if len(tokens) != len(hashes) * block_size:
                    fail(f"{len(tokens)} tokens for {len(hashes)} blocks of {block_size}")
                for i, h in enumerate(hashes):
                    if not (isinstance(h, int) and 0 <= h < 2**64):
                        fail(f"hash {h!r} is not a u64")
                    if h in self.blocks:
                        fail(f"block {h:x} stored twice")
                    self.blocks[h] = (parent, tokens[i * block_size:(i + 1) * block_size])
                    parent = h
                    self.stored += 1
            elif tag == "BlockRemoved":
                if len(event) != 3 or event[2] != "GPU":
                    fail(f"bad BlockRemoved {event!r}")
                for h in event[1]:
                    if self.blocks.pop(h, None) is None:
                        fail(f"block {h:x} removed but never stored")
                    self.removed += 1
            elif tag == "AllBlocksCleared":
                if len(event) != 1:
                    fail(f"bad AllBlocksCleared {event!r}")
                self.blocks.clear()
                self.cleared += 1
            else:
                fail(f"unknown event tag {tag!r}")


def main():
    base, pub_endpoint, replay_endpoint, topic = sys.argv[1:5]
    topic = topic.encode()
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(pub_endpoint)
    replay = context.socket(zmq.DEALER)
    replay.connect(replay_endpoint)
    live = {}

    def receive_live(timeout_ms):
        while sub.poll(timeout_ms):
            frames = sub.recv_multipart()
            if len(frames) != 3 or frames[0] != topic or len(frames[1]) != 8:
                fail(f"a published message is not [topic, seq, payload]: {frames[:2]!r}")
            live[int.from_bytes(frames[1], "big")] = frames[2]
            timeout_ms = 0

    # A PUB socket sends nothing to a subscriber it has not yet seen subscribe.
    time.sleep(0.5)
    system = [
        "You are a meticulous travel agent. Always answer with three short bullet points, "
        "mention one museum, one dish and one walk, and never exceed forty words in total. ",
        "You are a patient math tutor for children. Explain every step in plain words, use "
        "small numbers, check the answer twice and finish with a one-line summary of the rule. ",
        "You are a terse shell expert. Reply with a single POSIX command and one sentence on "
        "what it does; prefer coreutils, never use sudo and quote every path you touch. ",
    ]
    questions = ["What about Paris?", "And Rome, please?", "Tell me about Oslo."]
    prompts = []
    for q in questions:
        for s in system:
            prompts.append(s * 2 + q)
        prompts.append(f"A one-off request number {len(prompts)}: " + "lorem ipsum dolor " * 60)
    for prompt in prompts:
        post(base, "/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0})
        receive_live(0)

    state = get(base, "/debug/prefix_cache")
    last = state["kv_events"]["next_seq"] - 1
    if state["kv_events"]["dropped_batches"]:
        fail(f"the server dropped batches: {state['kv_events']}")
    deadline = time.time() + 10
    while (not live or max(live) < last) and time.time() < deadline:
        receive_live(100)
    if not live or max(live) < last:
        fail(f"live batches end at {max(live, default=None)}, the server published up to {last}")

    # Replay from 0: every batch the server kept, then the end marker.
    replay.send_multipart([b"", (0).to_bytes(8, "big")])
    replayed = {}
    while True:
        if not replay.poll(10_000):
            fail("the replay socket did not answer")
        frames = replay.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            fail(f"a replay reply is not ['', seq, payload]: {frames!r}")
        if frames[1] == END_OF_REPLAY:
            if frames[2] != b"":
                fail("the end marker carries a payload")
            break
        replayed[int.from_bytes(frames[1], "big")] = frames[2]
    if sorted(replayed) != list(range(last + 1)):
        fail(f"replayed sequence numbers {sorted(replayed)[:5]}... are not 0..={last}")
    for seq, payload in live.items():
        if replayed.get(seq) != payload:
            fail(f"batch {seq}: the replay differs from what was published")
    missed = [seq for seq in replayed if seq not in live]

    mirror = Mirror()
    for seq in range(last + 1):
        mirror.apply(replayed[seq])
    rebuilt = sorted(mirror.blocks)
    if rebuilt != state["block_hashes"]:
        only_events = set(rebuilt) - set(state["block_hashes"])
        only_server = set(state["block_hashes"]) - set(rebuilt)
        fail(f"rebuilt {len(rebuilt)} blocks, the server has {state['num_cached_blocks']}: "
             f"{len(only_events)} only in the events, {len(only_server)} only in the server")
    if mirror.removed == 0:
        fail("no block was evicted: the pool is too large for this check")
    if mirror.cleared != 1:
        fail(f"{mirror.cleared} AllBlocksCleared events; the stream opens with exactly one")
    print(json.dumps({
        "batches": last + 1,
        "received_live": len(live),
        "replayed_only": len(missed),
        "stored": mirror.stored,
        "removed": mirror.removed,
        "cached_blocks": len(rebuilt),
    }))


if __name__ == "__main__":
    main()
