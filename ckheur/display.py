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


_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~&"} | {"\n": " ", "\r": " ", "\t": " "})


def markdown_text(value: Any) -> str:
    """Text from a user's file (a layer name, a path) made inert in Markdown, a table cell included:
    every character Markdown or HTML gives a meaning is backslash-escaped, line breaks become spaces."""
    return str(value).translate(_MARKDOWN_SPECIAL)


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not read as a formula: text starting with ``= + - @`` (or a tab
    or carriage return) gets a leading ``'``; numbers and other text are kept as they are."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
