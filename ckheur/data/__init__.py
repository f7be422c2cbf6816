"""Datasets of measurements, the tuning database, and importing them."""
