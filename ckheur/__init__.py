"""ckheur: learn which GPU kernel to run, from config-driven sweeps of kernel libraries."""

__version__ = "0.1.0"
