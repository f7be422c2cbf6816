"""The package version: one home below everything that stamps it (datasets, bundles)."""

__version__ = "0.1.0"
