"""The client side of the interactive-query endpoint: ask the instance that owns a key.

Instances of one application share one config, so the client speaks as the servers listen: HTTPS when
``application.server.tls.cert`` (or ``application.server.tls.ca``) is set, trusting the CA in
``application.server.tls.ca`` (the system's CAs when empty), and sending ``application.server.token`` as a
bearer token. The token is never part of an error message.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from streaming.config import StreamsConfig
from streaming.errors import StreamsError


class RemoteQueryError(StreamsError):
    """Another instance could not answer a query (unreachable, refused the token or TLS, or failed)."""


class RemoteQueries:
    """``GET /stores/<store>/<key>`` on another instance, with the config's TLS trust and token."""

    def __init__(self, config: StreamsConfig, timeout: float = 10.0) -> None:
        ca = config["application.server.tls.ca"]
        self.scheme = "https" if config["application.server.tls.cert"] or ca else "http"
        self._context = ssl.create_default_context(cafile=ca or None) if self.scheme == "https" else None
        self._token = config["application.server.token"]
        self._timeout = timeout

    def get(self, host: str, store: str, key_text: str) -> tuple[int, dict[str, Any]]:
        """``(status, JSON body)`` of ``host``'s answer for ``key_text`` (the key as its URL segment)."""
        url = f"{self.scheme}://{host}/stores/{quote(store, safe='')}/{quote(key_text, safe='')}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            try:
                return error.code, json.loads(error.read())
            except ValueError:
                return error.code, {"error": error.reason}
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            hint = ("; check application.server.tls.ca" if isinstance(reason, ssl.SSLError) else "")
            raise RemoteQueryError(f"interactive queries: cannot ask {url}: {reason}{hint}") from None
