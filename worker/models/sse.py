"""An incremental Server-Sent Events parser: bytes in (split anywhere), events out. Pure."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SseEvent", "SseParser"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SseParser:
    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event = "message"
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buf += chunk
        out: list[SseEvent] = []
        while True:
            cut = self._next_line_end()
            if cut is None:
                return out
            end, skip = cut
            line = self._buf[:end].decode("utf-8", errors="replace")
            self._buf = self._buf[end + skip :]
            ev = self._line(line)
            if ev is not None:
                out.append(ev)

    def close(self) -> list[SseEvent]:
        """Whatever complete event is pending when the stream ends without a blank line."""
        out = self.feed(b"\n") if self._buf else []
        if self._data:
            out.append(SseEvent("\n".join(self._data), self._event, self._id))
            self._data = []
        return out

    def _next_line_end(self) -> tuple[int, int] | None:
        n = self._buf.find(b"\n")
        r = self._buf.find(b"\r")
        if r != -1 and (n == -1 or r < n):
            if r + 1 == len(self._buf):
                return None  # wait: it may be a CRLF split across chunks
            return r, 2 if self._buf[r + 1 : r + 2] == b"\n" else 1
        return (n, 1) if n != -1 else None

    def _line(self, line: str) -> SseEvent | None:
        if line == "":
            if not self._data:
                self._event = "message"
                return None
            ev = SseEvent("\n".join(self._data), self._event, self._id)
            self._data, self._event = [], "message"
            return ev
        if line.startswith(":"):
            return None  # a comment: keep-alive
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            self._id = value
        return None
