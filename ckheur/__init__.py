"""ckheur: learn which GPU kernel to run, from config-driven sweeps of kernel libraries."""

from ckheur.version import __version__

__all__ = ["Selector", "__version__"]


def __getattr__(name: str):
    # Lazy: `import ckheur` stays light; `from ckheur import Selector` loads the model code.
    if name == "Selector":
        from ckheur.selection.selector import Selector

        return Selector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
