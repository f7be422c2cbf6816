"""backend=replay: serve measurements from existing datasets (ours or CK CSVs).

Pairs absent from the data get status ``missing``; measured failures replay as failures.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ckheur.backends import BackendError, Measurer, Results
from ckheur.ops import get_family


def make(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    from ckheur.dataset import read_dataset

    if not cfg.get("paths"):
        raise BackendError("backend=replay needs backend.paths=[dataset or CK CSV, ...]")
    df = read_dataset(cfg["paths"])
    df = df[(df.arch == arch["name"]) & (df.direction == op["direction"]) & (df.dtype == op["dtype"])]
    cols = [*get_family(op["family"]).problems.FIELDS, "kernel"]
    table = {tuple(r[:-4]): r[-4:] for r in df[cols + ["latency_ms", "latency_spread_ms", "status", "error"]]
             .itertuples(index=False, name=None)}
    sources = ", ".join(map(str, cfg["paths"]))

    def measure(pairs: Sequence[tuple[Any, Any]]) -> Results:
        out = Results()
        for p, k in pairs:
            hit = table.get((*p.key(), k.name))
            if hit is None:
                out.add(float("nan"), "missing", f"not in replayed data ({sources})")
            else:
                lat, spread, status, error = hit
                out.add(float(lat), str(status), "" if error is None else str(error), float(spread))
        return out

    return Measurer(name="replay", measure=measure, batch_pairs=int(cfg["batch_pairs"]))
