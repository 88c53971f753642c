"""A KV-cache event subscriber that follows the disk tier (`--kv-offload-dir`), as a router
would: pyzmq and msgpack alone.

Usage: kv_events_disk_subscriber.py BASE_URL REPLAY_ENDPOINT DIR

It sends distinct long completions, more than the tier's size cap (`--kv-offload-max-gib`)
holds, then asks the replay socket for every batch from sequence 0 and applies the events
with `medium` "DISK" strictly (a stored block must be new, a removed one known). The files
are written and deleted by the tier's writer thread, whose report rides on the next step's
events, so it sends one-token requests (no full block: nothing new to write) until the
block set it rebuilt equals the block files in DIR, or fails after a minute.
Exit 0: identical, with some blocks removed; 1: a mismatch (printed); 3: pyzmq or msgpack
missing.
"""

import json
import pathlib
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


def post(base, body):
    request = urllib.request.Request(
        base + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def replay_all(socket):
    """Every batch the server kept, from sequence 0, in order."""
    socket.send_multipart([b"", (0).to_bytes(8, "big")])
    batches = []
    while True:
        if not socket.poll(10_000):
            fail("the replay socket did not answer")
        frames = socket.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            fail(f"a replay reply is not ['', seq, payload]: {frames!r}")
        if frames[1] == END_OF_REPLAY:
            return batches
        batches.append(frames[2])


def disk_blocks(batches):
    """The disk tier's block set the events describe, and how many were removed."""
    blocks, removed = set(), 0
    for payload in batches:
        _, events, _ = msgpack.unpackb(payload)
        for event in events:
            tag = event[0]
            if tag == "BlockStored":
                medium, hashes = event[6], event[1]
            elif tag == "BlockRemoved":
                medium, hashes = event[2], event[1]
            else:
                continue
            if medium not in ("GPU", "DISK"):
                fail(f"medium {medium!r}")
            if medium != "DISK":
                continue
            for h in hashes:
                if tag == "BlockStored":
                    if h in blocks:
                        fail(f"disk block {h:x} stored twice")
                    blocks.add(h)
                else:
                    if h not in blocks:
                        fail(f"disk block {h:x} removed but never stored")
                    blocks.remove(h)
                    removed += 1
    return blocks, removed


def files_in(directory):
    """The external hash (the key's last 8 bytes, big-endian) of every block file."""
    return {int(f.stem[-16:], 16) for f in pathlib.Path(directory).glob("*/*.kvb")}


def main():
    base, replay_endpoint, directory = sys.argv[1:4]
    replay = zmq.Context().socket(zmq.DEALER)
    replay.connect(replay_endpoint)
    words = ["river", "stone", "lamp", "cloud", "forest", "harbor", "violin", "garden"]
    for i, word in enumerate(words):
        prompt = f"Story {i} about a {word}: " + " ".join(f"{word}{j}" for j in range(90))
        post(base, {"prompt": prompt, "max_tokens": 2, "temperature": 0})
    deadline = time.time() + 60
    while True:
        post(base, {"prompt": "Hi", "max_tokens": 1, "temperature": 0})
        rebuilt, removed = disk_blocks(replay_all(replay))
        on_disk = files_in(directory)
        if rebuilt == on_disk and removed > 0:
            break
        if time.time() > deadline:
            fail(f"the events describe {len(rebuilt)} disk blocks ({removed} removed), "
                 f"the directory holds {len(on_disk)}: {len(rebuilt - on_disk)} only in the "
                 f"events, {len(on_disk - rebuilt)} only on disk")
        time.sleep(0.2)
    print(json.dumps({"disk_blocks": len(rebuilt), "removed": removed}))


if __name__ == "__main__":
    main()
