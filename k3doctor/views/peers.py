"""How peers agree: the value most of them hold, and who holds another (cards of a node, GPUs of a rack)."""
from __future__ import annotations

from collections import Counter


def majority(values: dict):
    """(most common value, keys holding another value); value None on a tie for first place."""
    counts = Counter(values.values()).most_common()
    if not counts:
        return None, []
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None, sorted(values)
    top = counts[0][0]
    return top, sorted(k for k, v in values.items() if v != top)
