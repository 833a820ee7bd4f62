"""``Serdes.Json(Order)``: JSON values read into and written from a declared type.

Kafka Streams reads typed records through ``Serdes.serdeFrom(Order.class)``; Faust has ``faust.Record``. Here the
type is a dataclass (nested dataclasses, ``Optional``, ``list``, ``dict``, ``datetime``, enums...), a
``msgspec.Struct``, any type msgspec understands (``list[Order]``, ``TypedDict``), or a pydantic ``BaseModel`` (or
pydantic dataclass), whose validators and config then apply. The bytes are plain JSON, the same a ``Serdes.Json()``
of the equivalent dict writes and reads, so typed and untyped applications share topics.

Which library, measured (bench/typed_json.py, 100k records of a 167-byte order with a datetime and a list of two
items; a 2-core machine shared with other work, best of 5 runs, ns per record):

- dataclass ``Order``, decode / encode: msgspec ``json.Decoder(Order)`` / ``Encoder`` 7 550 / 625; pydantic
  ``TypeAdapter(Order)`` (lax or strict) 9 060 / 1 700; orjson + ``Order(**d)``, checking no types at all,
  9 120 / 2 950;
- pydantic ``BaseModel``: ``model_validate_json`` / ``model_dump_json`` 18 100 / 2 340; orjson or msgspec into a
  dict + ``model_validate``, and ``orjson.dumps(model_dump())``: 19 400-20 800 / 5 070.

(A flat four-field dataclass: msgspec 1 220 ns, pydantic 1 790, orjson + construction 1 600; a ``msgspec.Struct``
420 ns, as fast as ``orjson.loads`` into a dict.) msgspec is the fastest that also checks types, so dataclasses
and every non-pydantic type go through msgspec; a pydantic model goes through pydantic's own JSON parser, which
beats parsing with orjson or msgspec and validating the dict after.

A value that does not fit the type raises :class:`~streaming.serdes.SerdeError` naming the field — ``Serdes.Json
(Order): field `items[1].qty`: expected `int`, got `str``` — which the runtime turns into a
``DeserializationError`` (the ``default.deserialization.exception.handler`` decides: fail, log and skip, or the
dead-letter topic, whose headers add topic, partition and offset). msgspec is strict: ``"12"`` is not an ``int``
(an ``int`` is accepted for a ``float``); pydantic applies the model's own mode (lax unless ``strict=True``).
Encoding does not re-check the fields of an object already built.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import msgspec

from streaming.serdes import Serde, SerdeError

_PATH = re.compile(r"(?P<message>.*) - at `\$(?P<path>.*)`", re.DOTALL)
_MISSING = re.compile(r"Object missing required field `(?P<name>.*)`")


def _is_pydantic(type_: Any) -> bool:
    try:
        import pydantic
        from pydantic.dataclasses import is_pydantic_dataclass
    except ImportError:  # pragma: no cover - pydantic is a runtime dependency
        return False
    return (isinstance(type_, type) and issubclass(type_, pydantic.BaseModel)) or is_pydantic_dataclass(type_)


def type_name(type_: Any) -> str:
    return getattr(type_, "__qualname__", None) or repr(type_)


def msgspec_error(serde: str, exc: msgspec.MsgspecError) -> SerdeError:
    """A :class:`SerdeError` from msgspec's ``Expected `int`, got `str` - at `$.items[0].qty```: the field first."""
    text = str(exc)
    match = _PATH.fullmatch(text)
    message, path = (match["message"], match["path"].removeprefix(".")) if match else (text, "")
    missing = _MISSING.fullmatch(message)
    if missing:
        path = f"{path}.{missing['name']}" if path else missing["name"]
        message = "missing (required)"
    if not isinstance(exc, msgspec.ValidationError):  # malformed JSON: no field to name
        return SerdeError(f"{serde}: {text}")
    field = f"field `{path}`: " if path else ""
    return SerdeError(f"{serde}: {field}{message[:1].lower()}{message[1:]}", field=path or None)


def pydantic_error(serde: str, exc: Any) -> SerdeError:
    """A :class:`SerdeError` from a pydantic ``ValidationError``: each error as ``field `a.b`: message``."""
    parts, fields = [], []
    for error in exc.errors(include_url=False):
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
        message = error["msg"][:1].lower() + error["msg"][1:]
        if path:
            fields.append(path)
            message = f"field `{path}`: {message}"
        if "input" in error and error["type"] != "missing" and path:
            message += f" (got {error['input']!r:.60})"
        parts.append(message)
    return SerdeError(f"{serde}: {'; '.join(parts)}", field=fields[0] if fields else None)


class TypedJsonSerde(Serde[Any]):
    """JSON read into and written from ``type_`` (see the module's docstring); made by ``Serdes.Json(type_)``."""

    def __init__(self, type_: Any) -> None:
        self.type = type_
        self._name = f"Serdes.Json({type_name(type_)})"
        if _is_pydantic(type_):
            import pydantic

            adapter = pydantic.TypeAdapter(type_)
            self._decode, self._encode = adapter.validate_json, adapter.dump_json
            self._decode_errors: tuple[type[Exception], ...] = (pydantic.ValidationError,)
            self._to_error = pydantic_error
        else:
            try:
                self._decode = msgspec.json.Decoder(type_).decode
            except TypeError as exc:
                raise TypeError(f"Serdes.Json({type_!r}): not a type msgspec or pydantic can read ({exc}); use a "
                                "dataclass, a msgspec.Struct or a pydantic BaseModel") from None
            self._encode = msgspec.json.Encoder().encode
            self._decode_errors = (msgspec.DecodeError,)
            self._to_error = msgspec_error

    def serialize(self, obj: Any) -> bytes | None:
        if obj is None:
            return None
        try:
            return self._encode(obj)
        except Exception as exc:
            raise SerdeError(f"{self._name}: cannot write {type(obj).__qualname__}: {exc}") from exc

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._decode(data)
        except self._decode_errors as exc:
            raise self._to_error(self._name, exc) from exc

    def __repr__(self) -> str:
        return self._name


def to_builtins(obj: Any, keep: tuple[type, ...] | None) -> Any:
    """A typed object as plain dicts and lists for a format library: ``keep`` types stay as they are (fastavro's
    logical types: datetimes, decimals); ``None``: JSON's types only (datetimes become ISO strings)."""
    if _is_pydantic(type(obj)):
        return obj.model_dump(mode="python" if keep else "json")
    if dataclasses.is_dataclass(obj) or isinstance(obj, msgspec.Struct):
        return msgspec.to_builtins(obj, builtin_types=keep)
    return obj


def converter(type_: Any, name: str) -> Any:
    """A function making ``type_`` from plain dicts and lists, raising :class:`SerdeError` that starts with ``name``
    (the serde's) and names the field."""
    if _is_pydantic(type_):
        import pydantic

        adapter = pydantic.TypeAdapter(type_)

        def convert_pydantic(value: Any) -> Any:
            try:
                return adapter.validate_python(value)
            except pydantic.ValidationError as exc:
                raise pydantic_error(name, exc) from exc

        return convert_pydantic

    def convert(value: Any) -> Any:
        try:
            return msgspec.convert(value, type_)
        except msgspec.ValidationError as exc:
            raise msgspec_error(name, exc) from exc

    return convert
