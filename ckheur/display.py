"""Plain-text tables for terminal output."""

from __future__ import annotations

from typing import Any, Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], max_rows: int = -1) -> str:
    """Left-aligned text table; with max_rows >= 0 only that many rows and a '... N more' line."""
    shown = list(rows) if max_rows < 0 else list(rows)[:max_rows]
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in shown]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if len(shown) < len(rows):
        lines.append(f"... {len(rows) - len(shown)} more (list.max_rows=-1 shows all)")
    return "\n".join(lines)
