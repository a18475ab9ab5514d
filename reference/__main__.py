"""Operator commands: apply the role recipe, migrate, validate grants, ensure history partitions, and
transcribe, detach, archive or prune a month of history."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import history
from .db import Session
from .errors import DurableError
from .migrations import migrate
from .roles import apply_recipe, validate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("roles", "apply the role recipe (as a superuser)"),
                       ("migrate", "apply pending migrations (as the migration owner)"),
                       ("validate-grants", "compare grants, row security and policies with the declared shape"),
                       ("ensure-partitions", "create the current and next schedule_history partitions (as the owner)")):
        command = sub.add_parser(name, help=text)
        command.add_argument("--dsn", required=True)
    months = sub.add_parser("history", help="a month of schedule history: transcript, then detach, archive or prune "
                                            "(as the owner; each refuses unless the transcript in DIR verifies)")
    actions = months.add_subparsers(dest="action", required=True)
    for name, text in (("transcript", "write the month's rows (JSON Lines) and manifest into DIR"),
                       ("detach", "detach a past month's partition"),
                       ("archive", "move a detached month into the archive schema"),
                       ("prune", "drop a detached or archived month")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--dsn", required=True)
        action.add_argument("--month", required=True, help="YYYY-MM")
        action.add_argument("directory", metavar="DIR", type=Path)
    args = parser.parse_args(argv)
    try:
        session = Session(args.dsn)
        if args.command == "roles":
            apply_recipe(session)
        elif args.command == "migrate":
            for name in migrate(session):
                print(f"applied {name}")
        elif args.command == "history":
            done = getattr(history, args.action)(session, args.month, args.directory)
            print(f"{args.action}: {done}")
        elif args.command == "ensure-partitions":
            for row in session.all("select appsurface_durable.ensure_schedule_history_partitions() as name"):
                print(row["name"])
        else:
            findings = validate(session)
            for finding in findings:
                print(finding)
            print("grants exact" if not findings else f"{len(findings)} finding{'s' * (len(findings) != 1)}")
            return 1 if findings else 0
    except DurableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
