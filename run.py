#!/usr/bin/env python
"""Thin wrapper: ``python run.py ...`` is the ``ckheur`` console script."""

from ckheur.cli import console

if __name__ == "__main__":
    console()
