"""Incremental parser for the server-sent events of a streaming OpenAI-style response.

Bytes arrive in arbitrary pieces: an event may be split anywhere, several may come in one piece,
lines may end in \\n or \\r\\n, ':' lines are comments, and `data: [DONE]` ends the stream."""

from __future__ import annotations

import orjson

DONE = object()


class SSEError(ValueError):
    pass


class SSEParser:
    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self.done = False

    def feed(self, chunk: bytes) -> list[object]:
        """Events completed by this chunk: parsed JSON objects, or DONE."""
        self._buf += chunk
        events: list[object] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                break
            line, self._buf = self._buf[:nl].rstrip(b"\r"), self._buf[nl + 1:]
            if not line:
                if self._data:
                    events.append(self._dispatch(b"\n".join(self._data)))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return events

    def close(self) -> list[object]:
        """Flush an event left without its blank line at the end of the stream."""
        events = self.feed(b"\n") if self._buf else []
        if self._data:
            events.append(self._dispatch(b"\n".join(self._data)))
            self._data = []
        return events

    def _dispatch(self, data: bytes) -> object:
        if data.strip() == b"[DONE]":
            self.done = True
            return DONE
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise SSEError(f"malformed event data ({exc}): {data[:80]!r}") from None
