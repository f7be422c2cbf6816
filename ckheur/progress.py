"""Progress of a long job (pairs measured, problems scored): a tqdm bar on terminals and in
notebooks, plain lines with rate and ETA in logs, or nothing."""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Mapping


class Progress:
    """Progress of a long job (measured pairs, scored problems): tqdm's bar (rate, ETA; terminals and notebooks) when ``mode`` is
    ``bar`` (``auto`` on a terminal or in a Jupyter kernel), plain lines every ``every_s`` seconds
    for logs (``log``: what CI logs and cluster job files want), or nothing (``none``)."""

    def __init__(self, total: int, mode: str = "auto", every_s: float = 10.0, stream: Any = None,
                 prefix: str = "sweep", unit: str = "pair") -> None:
        self.prefix, self.unit = prefix, unit
        self.stream = stream or sys.stderr
        mode = str(mode)
        if mode == "auto":
            mode = "bar" if self.stream.isatty() or "ipykernel" in sys.modules else "log"
        self.mode, self.total, self.every_s = mode, total, every_s
        self.done, self.t0, self.last = 0, time.perf_counter(), 0.0
        self.bar = None
        if mode == "bar":
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=prefix, unit=unit, file=self.stream, dynamic_ncols=True)

    def update(self, n: int, note: str = "") -> None:
        """Count ``n`` more pairs done; ``note`` says what the last batch gave."""
        self.done += n
        if self.done > self.total:  # more than planned (tune times the next k where its first k all failed)
            self.total = self.done
            if self.bar is not None:
                self.bar.total = self.total
        if self.mode == "bar":
            if self.bar is not None:
                self.bar.set_postfix_str(note, refresh=False)
                self.bar.update(n)
            return
        now = time.perf_counter()
        if self.mode == "none" or (now - self.last < self.every_s and self.done < self.total):
            return
        self.last = now
        el = now - self.t0
        rate = self.done / el if el > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        frac = self.done / self.total if self.total else 1.0
        self.stream.write(f"{self.prefix}: {self.done}/{self.total} {self.unit}s ({100 * frac:.0f}%) {rate:,.0f}/s "
                          f"ETA {eta:,.0f}s {note}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar (also when the run stops early)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def counts_text(counts: Mapping[str, int] | Iterable[str]) -> str:
    """Counts as words, the largest first: ``20000 ok, 3 failed`` (from a mapping or the items)."""
    from collections import Counter

    tally = Counter(counts) if not isinstance(counts, Mapping) else Counter(dict(counts))
    return ", ".join(f"{n} {name}" for name, n in sorted(tally.items(), key=lambda kv: (-kv[1], str(kv[0]))))
