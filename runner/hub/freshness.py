"""How fresh the telemetry must be, decided by who watches the run live.

Every batch a worker sends costs its rank a wake-up and the runner a line to decode,
and every commit costs the runner a SQLite transaction, all on the cores the ranks
train on. Fresh numbers are worth that only while someone looks at them as they come:
the GUI, ``rankwatch attach``, the live terminal table. So there are two settings:

* **watched**: workers send every ``WATCHED.worker_latency`` (40 ms) and the hub
  commits and publishes every ``FLUSH_SECONDS`` (50 ms): p95 freshness about 75 ms
  (``tests/bench/bench_freshness.py``, target <= 100 ms).
* **unwatched** (``rankwatch run --plain``, a detached or batch run): workers send
  every 0.25 s and the hub commits routine records every 0.5 s. Measured on the DDP
  benchmark job (``tests/bench/PERFORMANCE.md``): the runner's CPU about halves and
  each reporter wakes a fifth as often.

What never waits, watched or not: log lines, events (a rank started, failed, a
warning), the run's and the nodes' rows. They are committed and published within
``FLUSH_SECONDS``, so a plain terminal prints the script's output as promptly as
torchrun does. What is not slowed at all: the stall and straggler monitors, which see
each record when it arrives, not when it is committed. What a run that is not watched
gives up: a store reader (``runs show`` of a live run) sees metrics up to ~0.75 s old
instead of ~0.1 s, and a runner killed with SIGKILL loses up to that much more of them.

Workers learn the setting from a ``pace`` message (at their hello and whenever it
changes; a worker reads it at its next heartbeat, within a second). Workers behind a
remote node's agent are not told: they keep the watched latency.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

FLUSH_SECONDS = 0.05
"""The hub's rest between two commits: no subscriber gets more than ~20 updates a second."""


@dataclass(frozen=True)
class Freshness:
    watched: bool
    worker_latency: float
    """Seconds a record may wait in its worker before the batch is sent (``pace``)."""
    routine_flush_seconds: float
    """Seconds routine records (metrics, heartbeats, samples) may wait in the hub before
    they are committed and published; urgent ones never wait longer than ``FLUSH_SECONDS``."""


WATCHED = Freshness(watched=True, worker_latency=0.04, routine_flush_seconds=FLUSH_SECONDS)
UNWATCHED = Freshness(watched=False, worker_latency=0.25, routine_flush_seconds=0.5)


class Watcher(Protocol):
    closed: bool
    watches_live: bool


def freshness_for(subscribers: Iterable[Watcher]) -> Freshness:
    """``WATCHED`` while any open subscriber shows the run live, else ``UNWATCHED``."""
    return WATCHED if any(s.watches_live and not s.closed for s in subscribers) else UNWATCHED
