"""The framing every part speaks: newline-delimited JSON, one message per line.

Standard library only (workers import it in the user's interpreter). A line is at most
``MAX_LINE_BYTES``; every message is an object with ``type`` and ``v`` (``VERSION``); the
message kinds each direction may send are the ``*_TYPES`` sets. ``decode`` raises
``ProtocolError`` (with a countable ``reason``) for anything else: the receiver drops and
counts that line, and one bad line never ends a connection by itself.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # `typing` costs ~3 ms to import and workers import this module
if TYPE_CHECKING:
    from collections.abc import Mapping

    WireFields = Mapping[str, object]
    """A decoded JSON object as received: its values are untrusted and of any JSON type, so a
    reader checks each one (``numbers.as_int``, ``as_text``, ``isinstance``) before using it.
    What ``from_wire`` takes; ``decode`` gives the ``dict[str, object]`` it is read from."""


VERSION = 1
MAX_LINE_BYTES = 1 << 20
"""A line longer than this is dropped: 1 MiB holds thousands of metric records."""
HISTORY_LINE_BYTES = 256 << 10
"""A history replay is cut into update lines of about this size (always under ``MAX_LINE_BYTES``)."""


WORKER_TYPES = frozenset({"hello", "metrics", "heartbeat", "exception", "exit", "param_hash", "stacks", "flight_record",
                          "notice"})
AGENT_TYPES = frozenset({"agent_hello", "log", "worker_lost", "process_samples", "node_exit", "remote_stacks"})
AGENT_CONTROL_TYPES = frozenset({"launch", "stop", "stack_request"})
"""Head runner -> agent, on ssh's stdin (not hub messages: not in ``ALL_TYPES``)."""
SUBSCRIBER_TYPES = frozenset({"subscribe", "stop", "dump_stacks", "ping"})
HUB_TYPES = frozenset({"snapshot", "update", "history_end", "bye", "pong", "error", "pace"})
ALL_TYPES = WORKER_TYPES | AGENT_TYPES | SUBSCRIBER_TYPES | HUB_TYPES


class ProtocolError(ValueError):
    """A line that is not a valid message. ``reason`` is a short, countable label."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


# ---- framing -----------------------------------------------------------------------------------


def encode(message_type: str, **fields: object) -> bytes:
    """One framed message. ``allow_nan=False`` keeps the output strict JSON (NaN becomes null)."""
    body: dict[str, object] = {"type": message_type, "v": VERSION}
    body.update(fields)
    try:
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_replace_non_finite(body), separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass") + b"\n"


def _replace_non_finite(value: object) -> object:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {key: _replace_non_finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_non_finite(item) for item in value]
    return value


def decode(line: bytes, allowed: frozenset[str] = ALL_TYPES) -> dict[str, object]:
    """Parse one line (with or without its newline) into the message's fields.

    Raises:
        ProtocolError: too long, not UTF-8 JSON, nested too deeply (``[`` x 5000
            would exhaust the parser's recursion), not an object, missing or
            unknown ``type``, or a ``v`` this side does not speak.
    """
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("oversized", f"{len(line)} bytes")
    try:
        message = json.loads(line)
    except RecursionError:
        raise ProtocolError("too_deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError("malformed", str(exc)[:80]) from None
    if not isinstance(message, dict):
        raise ProtocolError("not_an_object")
    message_type = message.get("type")
    if not isinstance(message_type, str) or message_type not in allowed:
        raise ProtocolError("unknown_type", repr(message_type)[:40])
    if message.get("v") != VERSION:
        raise ProtocolError("bad_version", repr(message.get("v"))[:20])
    return message
