"""Scoring selections against measurements, and the reports made of it."""
