"""What one copy of the implementation starts with: the scenario's [instances.LABEL] over the run's options."""

from __future__ import annotations

import os
from datetime import timedelta

from scenarios.instances import Instance

from testhost.world.components import find_libfaketime

from . import skew


def instance_setup(instance: Instance | None, command: str, run_offset: timedelta | None,
                   use_commands: bool = True) -> tuple[str, dict[str, str], timedelta | None]:
    """(command, extra environment, clock offset): the instance's own command replaces --impl (unless this is the
    reference's census, which must learn what the reference reaches), its environment is added, and its
    clock_offset replaces --impl-clock-offset."""
    if instance is not None and instance.command and use_commands:
        command = instance.command
    extra = dict(instance.environment) if instance is not None else {}
    offset = instance.clock_offset if instance is not None and instance.clock_offset is not None else run_offset
    if offset is not None:
        extra.update(skew.environment(find_libfaketime(), offset, os.environ))
    return command, extra, offset
