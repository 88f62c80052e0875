"""Shuffle-private stochastic convex optimization: an experiment pipeline.

Layers (left may import right, never the reverse; shared/DESIGN.md §2):
cli → runner → engine → optimizers → protocols, accounting, problems; engine ↘ tracking.
"""
