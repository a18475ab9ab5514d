"""Judging a recorded case: the model, its timelines and replay, the checks and the verdict."""
