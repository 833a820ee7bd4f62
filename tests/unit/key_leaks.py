"""Every form a key could leak in (raw bytes, their repr, base64 both alphabets, hex both cases), and an assertion
that none of them is in some text or bytes. Shared by the field-encryption tests."""

from __future__ import annotations

import base64
from collections.abc import Iterable


def key_forms(key_b64: str) -> list[str]:
    """The text forms of the key whose base64 is ``key_b64``."""
    raw = base64.b64decode(key_b64)
    return [key_b64, key_b64.rstrip("="), base64.urlsafe_b64encode(raw).decode().rstrip("="), raw.hex(),
            raw.hex().upper(), repr(raw)[2:-1], raw.decode("latin-1")]


def assert_no_key(haystacks: Iterable[str | bytes | None], keys: Iterable[str]) -> None:
    """No form of any of ``keys`` (base64) is in any of ``haystacks``."""
    forms = [form for key in keys for form in key_forms(key)]
    raws = [base64.b64decode(key) for key in keys]
    for haystack in haystacks:
        if haystack is None:
            continue
        if isinstance(haystack, bytes):
            assert not any(raw in haystack for raw in raws), "raw key bytes leaked"
            assert not any(form.encode("latin-1", "replace") in haystack for form in forms), "a key form leaked"
            haystack = haystack.decode("latin-1")
        leaked = [form for form in forms if form in haystack]
        assert not leaked, f"key material leaked into: {haystack[:300]!r}"
