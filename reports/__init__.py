"""Turning a run's JSON transcript into human and machine formats."""


class ReportError(Exception):
    """A report cannot be read, rendered, merged, compared or verified; the message says what to fix."""
