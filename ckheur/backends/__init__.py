"""Backends measure (problem, kernel) pairs. Each module has ``make(backend_cfg, op, arch)``
returning a :class:`Measurer`; heavy or optional imports stay inside the backend module.

A measurer returns, for a list of pairs, parallel lists: latency_ms, latency_spread_ms,
status (one of ckheur.data.dataset.STATUSES), error (the reason, empty when ok) and workspace_bytes
(-1 where the backend does not say).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ckheur.errors import UserError
from ckheur.parts import UNKNOWN_WORKSPACE

class BackendError(UserError):
    """A backend is misconfigured or cannot run here; the message says what to change."""


BACKENDS = {
    "sim": "ckheur.backends.sim",
    "replay": "ckheur.backends.replay",
    "hip": "ckheur.backends.hip",
    "command": "ckheur.backends.command",
    "miopen_driver": "ckheur.backends.command",  # the command backend with MIOpenDriver's defaults
}


@dataclass
class Results:
    """Measurements of a list of pairs, in the same order."""

    latency_ms: list[float] = field(default_factory=list)
    latency_spread_ms: list[float] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    error: list[str] = field(default_factory=list)
    workspace_bytes: list[int] = field(default_factory=list)

    def add(self, latency_ms: float, status: str = "ok", error: str = "", spread: float = float("nan"),
            workspace_bytes: int = UNKNOWN_WORKSPACE) -> None:
        self.latency_ms.append(latency_ms)
        self.latency_spread_ms.append(spread)
        self.status.append(status)
        self.error.append(error)
        self.workspace_bytes.append(workspace_bytes)


@dataclass
class Measurer:
    """A ready backend: ``measure(pairs)`` plus provenance and a cleanup hook."""

    name: str
    measure: Callable[[Sequence[tuple[Any, Any]]], Results]
    warmup: int = 0
    repeat: int = 1
    batch_pairs: int = 20  # pairs per measure() call (and per dataset part file)
    close: Callable[[], None] = lambda: None
    clock_mhz: Callable[[], float] = lambda: float("nan")  # GPU clock at batch time, when exposed


def make_backend(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    """The configured backend, ready to measure."""
    name = cfg["name"]
    if name not in BACKENDS:
        raise BackendError(f"backend.name={name!r}: allowed values are {', '.join(BACKENDS)}")
    return importlib.import_module(BACKENDS[name]).make(cfg, op, arch)


@dataclass
class BackendMeasure:
    """A backend as the measure callable of ``Selector.select``:
    ``(problem, kernel_names) -> {kernel_name: latency_ms or None}``; ``results`` keeps the
    statuses and reasons so failures are recorded like a sweep's."""

    measurer: Measurer
    kernels: Mapping[str, Any]

    @property
    def provenance(self) -> dict[str, Any]:
        return {"backend": self.measurer.name, "warmup": self.measurer.warmup, "repeat": self.measurer.repeat}

    def results(self, problem: Any, names: Sequence[str]) -> Results:
        unknown = [n for n in names if n not in self.kernels]
        if unknown:
            raise BackendError(f"kernels not in this backend's pool: {', '.join(unknown[:5])}")
        return self.measurer.measure([(problem, self.kernels[n]) for n in names])

    def __call__(self, problem: Any, names: Sequence[str]) -> dict[str, float | None]:
        from ckheur.data.dataset import ran_ok

        res = self.results(problem, names)
        return {n: (lat if ran_ok(st, lat) else None) for n, lat, st in zip(names, res.latency_ms, res.status)}

    def close(self) -> None:
        self.measurer.close()


def measure_function(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any],
                     kernels: Sequence[Any]) -> BackendMeasure:
    """A measure callable for ``Selector.select`` from a backend config (sim, replay, hip, command)."""
    return BackendMeasure(make_backend(cfg, op, arch), {k.name: k for k in kernels})
