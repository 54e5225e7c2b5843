"""The rank table's filter: "stalled", "512-519", "node3 failed" -- which rows to show.

With a thousand ranks a person looks for a few: the stalled ones, a node's eight, a range
around the culprit. The filter is one line of words: a number or a range (``512-519``,
``3,7``) picks ranks; any other word must appear in the row's text (state, host, diagnosis
note, ...), case-insensitively. Words are ANDed, except that several rank words add up to one
set ("0-7 512-519"). "only", "rank" and "ranks" are filler ("only stalled", "ranks 0-3").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

FILLER = frozenset({"only", "rank", "ranks"})
_RANKS = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class RankFilter:
    ranks: frozenset[int] | None = None
    """The ranks asked for by number; None: no number given."""
    words: tuple[str, ...] = ()
    """Lower-case words each shown row must contain."""

    @classmethod
    def parse(cls, text: str) -> RankFilter:
        ranks: set[int] = set()
        numbered = False
        words = []
        for token in re.split(r"[\s,]+", text.strip().lower()):
            if not token or token in FILLER:
                continue
            match = _RANKS.match(token)
            if match is None:
                words.append(token)
                continue
            numbered = True
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) else first
            ranks.update(range(min(first, last), max(first, last) + 1))
        return cls(frozenset(ranks) if numbered else None, tuple(words))

    @property
    def empty(self) -> bool:
        return self.ranks is None and not self.words

    def accepts(self, rank: int, texts: Iterable[str]) -> bool:
        if self.ranks is not None and rank not in self.ranks:
            return False
        if not self.words:
            return True
        row = " ".join(texts).lower()
        return all(word in row for word in self.words)
