"""Turning a run's JSON transcript into human and machine formats."""
