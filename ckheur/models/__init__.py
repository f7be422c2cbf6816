"""Models: training, bundles, and the Selector."""
