"""What one job works on, resolved once from the config and passed down: the operator family
(its problem, kernel and feature modules), the op's settings, the arch, the kernel pool and the
simulator's parameters. Library functions take a ``Job`` instead of re-reading the config."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from ckheur.families import Family, get_family


ACROSS_GPUS = "gpus"  # the arch part of a model's folder name when it serves any GPU (train.across_gpus)


@dataclass(frozen=True)
class Job:
    """An op (family, direction, dtype and its settings) on an arch, with its kernel pool."""

    op: Mapping[str, Any]  # conf/op: family, direction, dtype, model_name, allow-lists ...
    arch: Mapping[str, Any]  # conf/arch: name, CUs, clocks, peaks ...
    kernel_filter: str | None = None  # kernels.filter: an expression over the kernels' traits
    family: Family = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", get_family(self.op["family"]))

    @classmethod
    def from_config(cls, cfg: Any) -> "Job":
        """The job of a composed ckheur config (its op, arch and kernels.filter)."""
        from ckheur.config import plain, resolve_device

        op = plain(cfg.op)
        resolved = getattr(get_family(op["family"]).kernels, "resolved_op", None)  # MIOpen: op.available's names
        return cls(resolved(op) if resolved is not None else op, resolve_device(plain(cfg.arch)), cfg.kernels.filter)

    @property
    def direction(self) -> str:
        return str(self.op["direction"])

    @property
    def dtype(self) -> str:
        return str(self.op["dtype"])

    @property
    def arch_name(self) -> str:
        return str(self.arch["name"])

    @property
    def model_name(self) -> str:
        """The bundle folder name of this op on this arch (conf/op's model_name)."""
        return str(self.op["model_name"])

    @property
    def across_gpus_model_name(self) -> str | None:
        """The folder name of the op's model for any GPU (train.across_gpus): the model name with the
        arch replaced by ``gpus`` (``miopen_fwd_fp32_gpus``); None where the name does not end with the arch."""
        name, arch = self.model_name, self.arch_name
        return f"{name[: -len(arch)]}{ACROSS_GPUS}" if name.endswith(f"_{arch}") else None

    @property
    def label(self) -> str:
        """How messages name the job: ``grouped_conv/fwd bf16 on gfx950``; ``gemm fp16 on gfx950`` (a GEMM
        has one direction, which its name does not carry)."""
        op = self.family.name if self.family.name == "gemm" else f"{self.family.name}/{self.direction}"
        return f"{op} {self.dtype} on {self.arch_name}"

    @property
    def slug(self) -> str:
        """A folder name for this job's data: ``grouped_conv_fwd_bf16_gfx950``."""
        return f"{self.family.name}_{self.direction}_{self.dtype}_{self.arch_name}"

    @cached_property
    def pool(self) -> Any:
        """The legal kernels of the op on the arch that pass the filter (``ckheur.kernels.Pool``)."""
        from ckheur.kernels import enumerate_pool

        return enumerate_pool(self.op, self.arch, self.kernel_filter)

    @cached_property
    def sim_params(self) -> dict:
        """The analytic model's parameters (conf/backend/sim.yaml; the dtype is the op's)."""
        from ckheur.sim import load_params

        return load_params()
