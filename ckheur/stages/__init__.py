"""Stages: each is a function ``run(cfg, ctx)`` in its own module, imported only when selected,
with ``OUTPUTS``: the names of the files it writes into the run folder."""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from ckheur.config import plain
from ckheur.errors import UserError
from ckheur.files import check_name, make_folder, read_regular, write_file

STAGES = {"list": "ckheur.stages.list_stage", "sweep": "ckheur.stages.sweep", "import": "ckheur.stages.import_stage",
          "train": "ckheur.stages.train", "evaluate": "ckheur.stages.evaluate", "predict": "ckheur.stages.predict",
          "search": "ckheur.stages.search", "tune": "ckheur.stages.tune", "report": "ckheur.stages.report",
          "export": "ckheur.stages.export"}


class StageError(UserError):
    """A stage cannot run with the given config; the message says what to change."""


@dataclass
class Context:
    """What a stage needs besides its config: where to write and which options were chosen."""

    output_dir: Path
    choices: dict[str, Any] = field(default_factory=dict)


def run_stage(cfg: DictConfig, output_dir: str | Path, choices: dict[str, Any] | None = None,
              remove_empty_to: Path | None = None) -> Any:
    """Validate the composed config and run its stage; user errors exit with a clear message.
    ``remove_empty_to``: a run folder the stage wrote nothing into is removed (with Hydra's record),
    and the folders above it that this leaves empty, up to this one (the topmost the run created)."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise SystemExit(f"error: mandatory config values are missing: {', '.join(missing)}")
    name = cfg.stage.name
    if name not in STAGES:
        raise SystemExit(f"error: stage={name!r} unknown; allowed: {', '.join(STAGES)}")
    module = importlib.import_module(STAGES[name])
    ctx = Context(output_dir=Path(output_dir), choices=dict(choices or {}))
    before = folder_files(ctx.output_dir) if ctx.output_dir.is_dir() else {}
    ours: dict | None = None  # the stage's output files there before it ran, once checked to be ckheur's

    def unused() -> bool:
        """Remove the run folder (with Hydra's record) if the stage wrote nothing into it, whether it
        ended or failed; whether it was removed."""
        return remove_empty_to is not None and not before and ctx.output_dir.is_dir() \
            and not folder_files(ctx.output_dir) and _remove_empty(ctx.output_dir, remove_empty_to)

    try:
        check_names(cfg)
        check_numbers(cfg)
        ours = check_outputs(ctx.output_dir, name, module.OUTPUTS)
        make_folder(ctx.output_dir, "run folder")
        result = module.run(cfg, ctx)
        if unused():
            print("outputs: none (this stage wrote no files, so no run folder is kept)")
        else:
            print(outputs_line(ctx.output_dir, before, list(ours)))
        return result
    except (UserError, OSError) as e:
        message = str(e) if isinstance(e, UserError) else \
            f"{e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}"
        print(f"error: {message}", file=sys.stderr)
        unused()
        raise _exit(2, message) from None
    except KeyboardInterrupt:
        print("interrupted: what was saved stays saved", file=sys.stderr)
        raise _exit(130, "interrupted") from None
    finally:
        if ours is not None:  # a record that cannot be written only makes the next run refuse to replace these
            with contextlib.suppress(UserError, OSError):
                record_outputs(ctx.output_dir, module.OUTPUTS, ours)


def folder_files(folder: Path) -> dict[str, tuple[int, int]]:
    """The files under a run folder (not Hydra's record of the config, nor ckheur's record of its
    outputs), with their modification times and sizes."""
    out = {}
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if rel.parts[0] not in (".hydra", OUTPUTS_RECORD) and p.is_file():
            st = p.stat()
            out[rel.as_posix()] = (st.st_mtime_ns, st.st_size)
    return out


# ckheur's record, in a run folder, of the files its stages wrote there (name -> [mtime_ns, size]):
# a file of a stage's output name is replaced only when it is as a stage left it. Hydra writes its
# own record (.hydra) before the stage starts, so that cannot tell a run's folder from a user's.
OUTPUTS_RECORD = ".ckheur-outputs.json"


def _recorded(folder: Path) -> dict[str, tuple[int, int]]:
    """The run folder's record of ckheur's outputs; a record that is not ckheur's is refused."""
    path = folder / OUTPUTS_RECORD
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        files = json.loads(read_regular(path))["files"]
        return {str(k): (int(v[0]), int(v[1])) for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        raise StageError(f"run folder {folder} holds {OUTPUTS_RECORD}, which is not ckheur's record of its "
                         "outputs; name another run folder (hydra.run.dir=<a new folder>)") from None


def _stats(folder: Path, names: Sequence[str]) -> dict[str, tuple[int, int]]:
    """The named files of a run folder that exist, with their modification times and sizes."""
    out = {}
    for name in names:
        try:
            st = (folder / name).stat()
        except OSError:
            continue
        out[name] = (st.st_mtime_ns, st.st_size)
    return out


def check_outputs(folder: Path, stage: str, outputs: Sequence[str]) -> dict[str, tuple[int, int]]:
    """The stage's output files already in the run folder, each as an earlier stage left it (this
    run replaces them); a StageError naming any other: a file ckheur did not write, or one changed
    since, is never replaced."""
    present = _stats(folder, outputs)
    if not present:
        return present
    record = _recorded(folder)
    foreign = [n for n, v in present.items() if record.get(n) != v]
    if foreign:
        raise StageError(f"run folder {folder} holds {', '.join(foreign)}, which ckheur did not write there (or "
                         f"which changed since): stage={stage} writes files of those names and replaces none of "
                         "another's; name a new run folder (hydra.run.dir=<folder>), or move the files")
    return present


def check_run_folder(folder: Path, stage: str) -> None:
    """:func:`check_outputs` for the stage a config names, before anything is written there."""
    if stage in STAGES:
        check_outputs(folder, stage, importlib.import_module(STAGES[stage]).OUTPUTS)


def record_outputs(folder: Path, outputs: Sequence[str], before: dict[str, tuple[int, int]]) -> None:
    """Add the stage's output files this run wrote or changed in the run folder to its record
    (nothing when it wrote none, so an unused folder stays removable)."""
    wrote = {n: v for n, v in _stats(folder, outputs).items() if before.get(n) != v}
    if not wrote:
        return
    kept = {n: v for n, v in _recorded(folder).items() if (folder / n).exists()}
    write_file(folder / OUTPUTS_RECORD, json.dumps({"files": {**kept, **wrote}}, sort_keys=True))


HYDRA_RECORD = ("config.yaml", "hydra.yaml", "overrides.yaml")  # what Hydra writes into a run folder's .hydra


def _remove_empty(folder: Path, top: Path) -> bool:
    """Remove a run folder holding only Hydra's record of the run, and the folders above it this
    leaves empty, up to ``top`` (the topmost folder the run created; never above it); False
    (nothing removed) when it holds anything else."""
    record = folder / ".hydra"
    if {p.name for p in folder.iterdir()} - {".hydra"} or (record.is_dir() and
                                                          {p.name for p in record.iterdir()} - set(HYDRA_RECORD)):
        return False
    for name in HYDRA_RECORD:
        (record / name).unlink(missing_ok=True)
    if record.is_dir():
        record.rmdir()
    path, top = folder.absolute(), top.absolute()
    while path == top or top in path.parents:
        try:
            path.rmdir()
        except OSError:  # not empty: another run's folder is there
            break
        path = path.parent
    return True


def outputs_line(folder: Path, before: dict[str, tuple[int, int]], replaced: Sequence[str] = (), shown: int = 12) -> str:
    """Where a stage's outputs are: the run folder and the files this run wrote or changed there,
    and which of them an earlier run's stage had written."""
    after = folder_files(folder)
    wrote = sorted(f for f, t in after.items() if before.get(f) != t)
    top = sorted({f.split("/", 1)[0] + ("/" if "/" in f else "") for f in wrote})  # a subfolder once
    listed = ", ".join(top[:shown]) + (f", ... ({len(top) - shown} more)" if len(top) > shown else "")
    again = [f for f in replaced if f in wrote]
    return f"outputs: {folder}" + (f" ({listed})" if listed else " (no files)") + \
        (f"; an earlier run's {', '.join(again)} replaced" if again else "")


# Config values that become one component of a path, by field.
NAME_FIELDS = ("arch.name", "op.model_name", "problems.name", "evaluate.problems", "import.dataset", "export.name")


# Where an infinite number has a meaning (the field's documentation says which): every other
# number of a config must be finite.
INFINITE_OK = ("op.remember_margin",)  # inf: the remembered answer always


def check_numbers(cfg: DictConfig) -> None:
    """Refuse, naming the field, a NaN or infinite number anywhere in the config: every number is
    compared somewhere (a gate, a bound, a budget), and NaN fails no comparison, so a NaN gate
    passes anything; infinity only where INFINITE_OK gives it a meaning."""
    import math

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{where}.{key}" if where else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")
        elif isinstance(node, float) and not math.isfinite(node) and (math.isnan(node) or where not in INFINITE_OK):
            raise UserError(f"{where}={node}: give a finite number (NaN passes no comparison; infinity is "
                            f"allowed only in {', '.join(INFINITE_OK)})")

    walk(OmegaConf.to_container(cfg, resolve=False), "")


def check_names(cfg: DictConfig) -> None:
    """Refuse, naming the field, a config name that is not a single safe path component."""
    for field_name in NAME_FIELDS:
        value = OmegaConf.select(cfg, field_name, default=None)
        if value is not None:
            check_name(value, field_name)


def _exit(code: int, message: str) -> SystemExit:
    """A SystemExit that carries the one-line message printed (a multirun's summary repeats it)."""
    e = SystemExit(code)
    e.message = message  # type: ignore[attr-defined]
    return e


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The packaged config composed with overrides written as on the command line (free-text
    values such as ``kernels.filter=tile_m == 64`` need no Hydra quoting); no Hydra run."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from ckheur.conf_source import choices_map_when_interpolated, nodes_copied_directly, store_shared
    from ckheur.config import quote_free_text, register_configs
    from ckheur.families import op_schemas

    register_configs({"op": op_schemas()})
    GlobalHydra.instance().clear()
    with (initialize_config_module("ckheur.conf", version_base="1.3"), store_shared(),
          choices_map_when_interpolated(), nodes_copied_directly()):
        return compose(config_name="config", overrides=quote_free_text(list(overrides)))


def run_overrides(overrides: list[str] | tuple[str, ...], output_dir: str | Path, quiet: bool = False) -> Any:
    """Compose with overrides and run the stage in this process (scripts, benches, notebooks);
    ``quiet`` swallows the stage's printed output."""
    import contextlib
    import io

    cfg = compose_config(overrides)
    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        return run_stage(cfg, output_dir)


__all__ = ["STAGES", "Context", "StageError", "compose_config", "plain", "run_overrides", "run_stage"]
