"""The Selector (a bundle plus exact tiers) and predicting with it."""
