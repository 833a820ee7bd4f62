"""A query client for the multi-host test, run on one host (``ip netns exec``): asks one worker's
interactive-query endpoint for each key and, when that worker answers ``421`` (another instance runs the
key's task), asks the owner it names. Prints one JSON line per key::

    {"key": "k-07", "asked": "10.213.5.11:7070", "first": 421, "owner": "10.213.5.13:7070",
     "status": 200, "value": 42, "answered_by": "10.213.5.13:7070"}

Usage: ``python -m tests.integration.workloads.ask_owner HOST:PORT STORE KEY...``
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote


def get(server: str, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://{server}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def ask(server: str, store: str, key: str) -> dict[str, Any]:
    path = f"/stores/{quote(store, safe='')}/{quote(key, safe='')}"
    first, body = get(server, path)
    answer: dict[str, Any] = {"key": key, "asked": server, "first": first, "owner": body.get("owner", server)}
    status = first
    if first == 421:
        status, body = get(body["owner"], path)
    answer.update(status=status, value=body.get("value"), answered_by=body.get("host"))
    return answer


def main(argv: list[str]) -> None:
    server, store, *keys = argv
    for key in keys:
        print(json.dumps(ask(server, store, key)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
