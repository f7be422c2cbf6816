"""The package version: one home below everything that stamps it (datasets, bundles).

The number lives in pyproject.toml only: a source checkout reads it there (so a checkout run
without installing says its own version), an installed package from its metadata."""

from __future__ import annotations

from pathlib import Path

UNKNOWN = "0+unknown"


def read_version() -> str:
    """ckheur's version: the checkout's pyproject.toml, else the installed metadata, else 0+unknown."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        import tomllib

        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == "ckheur" and project.get("version"):
            return str(project["version"])
    except (ImportError, OSError, ValueError):  # no tomllib before 3.11, no pyproject when installed
        pass
    from importlib import metadata

    try:
        return metadata.version("ckheur")
    except metadata.PackageNotFoundError:
        return UNKNOWN


__version__ = read_version()
