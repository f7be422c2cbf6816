"""Learning: training tables, cross-validation, candidates and their choice, the prior, bundles."""
