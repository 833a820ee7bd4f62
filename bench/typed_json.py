"""Typed JSON decode+construct and encode, ns per record: the figures in streaming/typed_json.py's docstring.

Run: .venv/bin/python bench/typed_json.py (about 30 s; best of 5 runs of 100k records each)."""

import dataclasses
import datetime as dt
import gc
import time

import msgspec
import orjson
import pydantic


@dataclasses.dataclass
class Item:
    sku: str
    qty: int
    price: float

@dataclasses.dataclass
class Order:
    order_id: str
    user_id: str
    amount: int
    created: dt.datetime
    items: list[Item]
    note: str | None = None

class PItem(pydantic.BaseModel):
    sku: str; qty: int; price: float
class POrder(pydantic.BaseModel):
    order_id: str; user_id: str; amount: int; created: dt.datetime; items: list[PItem]; note: str | None = None

N = 100_000
now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
objs = [Order(f"o{i}", f"u{i%100}", i, now, [Item("a", 1, 2.5), Item("b", 2, 1.0)]) for i in range(N)]
blobs = [orjson.dumps(o) for o in objs]
pobjs = [POrder.model_validate_json(b) for b in blobs]


def t(name, f, xs):
    best = 1e9
    for _ in range(5):
        gc.collect(); s = time.perf_counter(); [f(x) for x in xs]; best = min(best, time.perf_counter() - s)
    e = best
    print(f"{name:45s} {e*1e9/N:7.0f} ns/record  {N/e/1e3:6.0f}k/s")

def construct(d):  # orjson + construction, no validation
    d["items"] = [Item(**i) for i in d["items"]]
    d["created"] = dt.datetime.fromisoformat(d["created"])
    return Order(**d)
dec = msgspec.json.Decoder(Order); enc = msgspec.json.Encoder()
ta = pydantic.TypeAdapter(Order)
ta_strict = pydantic.TypeAdapter(Order, config=None)
print("decode+construct")
t("dataclass msgspec Decoder(Order)", dec.decode, blobs)
t("dataclass orjson.loads + Order(**d) (unchecked)", lambda b: construct(orjson.loads(b)), blobs)
t("dataclass pydantic TypeAdapter.validate_json", ta.validate_json, blobs)
t("dataclass pydantic validate_json strict", lambda b: ta.validate_json(b, strict=True), blobs)
t("BaseModel pydantic model_validate_json", POrder.model_validate_json, blobs)
pdec = msgspec.json.Decoder()
t("BaseModel msgspec.json.decode + model_validate", lambda b: POrder.model_validate(pdec.decode(b)), blobs)
t("BaseModel orjson.loads + model_validate", lambda b: POrder.model_validate(orjson.loads(b)), blobs)
t("(dict) orjson.loads", orjson.loads, blobs)
print("encode")
t("dataclass msgspec Encoder", enc.encode, objs)
t("dataclass orjson.dumps", orjson.dumps, objs)
t("dataclass pydantic dump_json", ta.dump_json, objs)
t("BaseModel model_dump_json", lambda m: m.model_dump_json(), pobjs)
t("BaseModel orjson.dumps(model_dump())", lambda m: orjson.dumps(m.model_dump()), pobjs)
print(len(blobs[0]), blobs[0])
