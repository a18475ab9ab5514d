"""Turning a run's JSON transcript into human and machine formats."""


class ReportError(Exception):
    """A report cannot be read, rendered, merged, compared or verified; the message says what to fix."""


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 case`, `2 cases`, `0 cases`: a count and its noun in agreement (`plural` where adding "s" is wrong)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
