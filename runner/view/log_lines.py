"""One prefix per output line, alike in the live terminal and in ``rankwatch runs logs``.

Rankwatch prefixes each line with where it came from (``[rank 1]``, ``[node-b rank 9]``,
``[torchrun]``). torch's own excepthook already prefixes a rank's error lines with
``[rank1]: ``; shown under Rankwatch's prefix that read ``[rank 1] [rank1]: Traceback``. Both
surfaces print a stored or live line through ``prefixed_line``, so they cannot disagree.
"""

from __future__ import annotations

__all__ = ["format_prefix", "prefixed_line", "without_torch_prefix"]


def format_prefix(rank: int | None, node: str | None, multi_node: bool, launcher: str = "torchrun") -> str:
    """``launcher``: who wrote the lines of no rank (``script``: a self-spawning script's own process)."""
    if rank is None:
        return f"[{node} {launcher}]" if multi_node and node else f"[{launcher}]"
    return f"[{node} rank {rank}]" if multi_node and node else f"[rank {rank}]"


def without_torch_prefix(line: str, rank: int | None) -> str:
    """``[rank1]: Traceback`` -> ``Traceback`` on rank 1's line (torch's prefix names the rank Rankwatch's
    prefix names already); a line of another rank's prefix, or of none, is left as it is."""
    if rank is not None:
        own = f"[rank{rank}]:"
        if line.startswith(own):
            rest = line[len(own):]
            return rest[1:] if rest.startswith(" ") else rest
    return line


def prefixed_line(rank: int | None, node: str | None, multi_node: bool, text: str, launcher: str = "torchrun") -> str:
    """The line as printed: one prefix, then the text without torch's own."""
    return f"{format_prefix(rank, node, multi_node, launcher)} {without_torch_prefix(text, rank)}"
