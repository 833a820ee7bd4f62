"""Stateless: decode, filter (amount > 10), add a field ("big"), encode, produce -- Brook against the loop.

    .venv/bin/python bench/stateless.py [--records N]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as C
from bench import harness as H


def loop(cfg: dict[str, Any], producer: Any) -> H.Loop:
    import orjson

    loads, dumps, send, out = orjson.loads, orjson.dumps, H.sender(producer), cfg["out"]

    def step(messages: list[Any]) -> None:
        for m in messages:
            v = loads(m.value())
            if v["amount"] > 10:
                send(out, dumps({**v, "big": v["amount"] > 50}), m.key(), m.timestamp()[1])
    return H.Loop(step)


def brook(cfg: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    from streaming import Serdes, StreamsBuilder

    builder = StreamsBuilder()
    (builder.stream(cfg["topics"][0], key_serde=Serdes.String(), value_serde=Serdes.Json())
     .filter(lambda k, v: v["amount"] > 10)
     .map_values(lambda v: {**v, "big": v["amount"] > 50})
     .to(cfg["out"], key_serde=Serdes.String(), value_serde=Serdes.Json()))
    return builder.build(), {}


def verify(bootstrap: str, records: int) -> Any:
    """``verify(cfg)``: every passing order exactly once, with its key and the added field."""
    import orjson

    def check(cfg: dict[str, Any]) -> str | None:
        seen: dict[int, Any] = {}
        for m in C.iter_topic(bootstrap, cfg["out"], H.PARTITIONS):
            v = orjson.loads(m.value())
            if v["order_id"] in seen or m.key().decode() != C.key_of(v["order_id"]):
                return f"order {v['order_id']} twice or under the wrong key"
            seen[v["order_id"]] = v
        wrong = sum(1 for n in range(records) if seen.get(n) != (C.map_value(C.value_of(n))
                                                                  if C.passes_filter(C.value_of(n)) else None))
        return f"{wrong:,} orders missing or wrong" if wrong else None
    return check


def main(argv: list[str] | None = None) -> int:
    with H.Run("stateless", "decode, filter, add a field, encode, produce", argv) as run:
        source = run.topic("in")
        ends = {source: H.load(run.bootstrap, source, H.orders(run.args.records))}
        check = verify(run.bootstrap, run.args.records)
        for _ in run.rounds():
            for label in ("loop", "brook"):
                run.side(label, label, run.cfg(label, topics=[source], out=run.topic(f"out-{label}"), ends=ends),
                         run.args.records, verify=check)
        run.versus("loop", "brook", "loop", 0.85)
        return run.finish()


if __name__ == "__main__":
    sys.exit(main())
