"""Model bundles: the LightGBM model (gzipped text) with everything needed to use and audit it.

Files: model.txt.gz, [tflops_model.txt.gz], feature_spec.json, kernels.json, cv_metrics.json,
feature_importances.json, train_manifest.json.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ckheur.errors import UserError

REQUIRED = ("model.txt.gz", "feature_spec.json", "kernels.json", "train_manifest.json")
SPEC_KEYS = ("engine", "encoding_version", "feature_names", "categorical", "analytic", "objective", "arch", "op")


def shipped_models_dir() -> Path:
    """Where the shipped bundles are: ckheur/bundles in a wheel, models/ in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    return here / "bundles" if (here / "bundles").is_dir() else here.parent / "models"


def resolve_model_dir(path: str | Path) -> Path:
    """A model folder as given; a missing ``models/<name>`` is looked up among the shipped bundles
    (so an installed wheel finds them from any directory). Other paths are never redirected."""
    path = Path(path)
    if path.is_dir() or path.is_absolute() or path.parent != Path("models"):
        return path
    shipped = shipped_models_dir() / path.name
    return shipped if shipped.is_dir() else path


class BundleError(UserError):
    """A model bundle is missing, corrupted, or incompatible; the message says precisely how."""


@dataclass
class Bundle:
    path: Path
    booster: Any
    tflops_booster: Any  # None when the main model already predicts TFLOPS (regression_log)
    spec: dict
    kernels: list
    cv_metrics: dict
    manifest: dict


def _write_json(path: Path, obj: Any) -> None:
    from ckheur.files import write_file

    write_file(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def save_bundle(path: str | Path, booster: Any, tflops_booster: Any, spec: Mapping, kernels: list,
                cv_metrics: Mapping, importances: Mapping, manifest: Mapping) -> Path:
    """Write a bundle folder (replacing the files of an older bundle there)."""
    from ckheur.files import make_folder, write_file

    path = make_folder(path, "bundle folder")
    write_file(path / "model.txt.gz", gzip.compress(booster.model_to_string().encode(), mtime=0))
    extra = path / "tflops_model.txt.gz"
    if tflops_booster is not None:
        write_file(extra, gzip.compress(tflops_booster.model_to_string().encode(), mtime=0))
    elif extra.exists() or extra.is_symlink():
        extra.unlink()
    _write_json(path / "feature_spec.json", dict(spec))
    _write_json(path / "kernels.json", [k.traits() for k in kernels])
    _write_json(path / "cv_metrics.json", dict(cv_metrics))
    _write_json(path / "feature_importances.json", dict(importances))
    _write_json(path / "train_manifest.json", dict(manifest))
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: corrupted JSON ({e})") from None


def _read_booster(path: Path) -> Any:
    from ckheur.threads import lightgbm

    lgb = lightgbm()
    try:
        with gzip.open(path, "rt") as f:
            text = f.read()
        return lgb.Booster(model_str=text)
    except (OSError, EOFError, lgb.basic.LightGBMError) as e:
        raise BundleError(f"{path}: corrupted model file ({str(e).splitlines()[0][:200]})") from None


def load_bundle(path: str | Path) -> Bundle:
    """Load and verify a bundle against this ckheur's feature engine."""
    from ckheur.features import get_engine
    from ckheur.ops import get_family

    path = resolve_model_dir(path)
    if not path.is_dir():
        raise BundleError(f"model bundle {path} not found")
    missing = [f for f in REQUIRED if not (path / f).exists()]
    if missing:
        raise BundleError(f"model bundle {path} is incomplete: missing {', '.join(missing)}")
    spec = _read_json(path / "feature_spec.json")
    lacking = [k for k in SPEC_KEYS if k not in spec]
    if lacking:
        raise BundleError(f"{path / 'feature_spec.json'} lacks {', '.join(lacking)}")
    try:
        engine = get_engine(spec["engine"])
    except ValueError as e:
        raise BundleError(f"{path}: {e}") from None
    if spec["encoding_version"] != engine.ENCODING_VERSION:
        raise BundleError(f"{path}: features encoded with version {spec['encoding_version']}, this ckheur computes "
                          f"version {engine.ENCODING_VERSION}; retrain the model")
    expected = engine.feature_names(spec["analytic"])
    if spec["feature_names"] != expected:
        diff = sorted(set(spec["feature_names"]) ^ set(expected))
        raise BundleError(f"{path}: feature names differ from this ckheur's engine ({', '.join(diff) or 'order'})")
    booster = _read_booster(path / "model.txt.gz")
    if booster.num_feature() != len(expected):
        raise BundleError(f"{path}: model has {booster.num_feature()} features, spec has {len(expected)}")
    extra = path / "tflops_model.txt.gz"
    tflops_booster = _read_booster(extra) if extra.exists() else None
    if spec["objective"] != "regression_log" and tflops_booster is None:
        raise BundleError(f"{path}: objective {spec['objective']} needs tflops_model.txt.gz for TFLOPS estimates")
    try:
        from_traits = get_family(spec["op"]["family"]).kernels.from_traits
        kernels = [from_traits(d) for d in _read_json(path / "kernels.json")]
    except (TypeError, ValueError, KeyError) as e:
        raise BundleError(f"{path / 'kernels.json'}: {e}") from None
    cv = _read_json(path / "cv_metrics.json") if (path / "cv_metrics.json").exists() else {}
    return Bundle(path=path, booster=booster, tflops_booster=tflops_booster, spec=spec, kernels=kernels,
                  cv_metrics=cv, manifest=_read_json(path / "train_manifest.json"))


def incompatibilities(spec: Mapping, other: Mapping) -> list[str]:
    """Why a bundle cannot be warm-started with another feature spec ([] if it can)."""
    out = []
    for key in ("engine", "encoding_version", "feature_names", "analytic", "objective", "prior"):
        if spec.get(key) != other.get(key):
            a, b = spec.get(key), other.get(key)
            if key == "feature_names":
                a, b = f"{len(a or [])} features", f"{len(b or [])} features"
            out.append(f"{key}: bundle has {a}, this run has {b}")
    if spec.get("arch", {}).get("name") != other.get("arch", {}).get("name"):
        out.append(f"arch: bundle has {spec.get('arch', {}).get('name')}, this run has {other.get('arch', {}).get('name')}")
    if spec.get("op") != other.get("op"):
        out.append(f"op: bundle has {spec.get('op')}, this run has {other.get('op')}")
    return out
