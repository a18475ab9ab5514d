"""The scenario package's errors: one root, ScenarioError, whose message names the file, line, step and field."""


class ScenarioError(ValueError):
    """A scenario file is malformed; the message names the file, the step and the field."""


class StepError(ScenarioError):
    """A step is malformed; the message names the field (the parser adds the file, line and step)."""


class TimeError(ScenarioError):
    """A scenario time is not of the form +90s, -5s or accepted+5s."""
