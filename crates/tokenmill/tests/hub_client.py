"""The official huggingface_hub client against a Hub (tests/it/hub_models.rs runs it).

    hub_client.py ENDPOINT HF_HOME download REPO FILE=SHA256...  fetch each into HF_HOME's cache
    hub_client.py ENDPOINT HF_HOME offline REPO FILE=SHA256...   find each there, HF_HUB_OFFLINE=1

Each file's bytes must have the sha256 given. Exits 3 where huggingface_hub cannot be
imported, 1 on a failed check.
"""

import hashlib
import os
import sys


def main():
    endpoint, hf_home, mode, repo, *files = sys.argv[1:]
    # The package reads its settings from the environment when it is imported.
    os.environ["HF_ENDPOINT"] = endpoint
    os.environ["HF_HOME"] = hf_home
    os.environ.pop("HF_HUB_CACHE", None)
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    if mode == "offline":
        os.environ["HF_HUB_OFFLINE"] = "1"
    elif mode != "download":
        print(f"unknown mode {mode}", file=sys.stderr)
        return 1
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return 3
    for spec in files:
        name, expected = spec.split("=")
        path = hf_hub_download(repo_id=repo, filename=name)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != expected:
            print(f"{name}: sha256 {digest} at {path}, expected {expected}", file=sys.stderr)
            return 1
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
