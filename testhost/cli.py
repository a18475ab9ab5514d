"""The `crashproof` command line."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import TestHostError
from .workspace import Workspace


def _world_from_args(args) -> "World":
    from .world import ExternalWorld, World, docker_world
    if args.dsn and args.docker:
        raise TestHostError("--dsn and --docker exclude each other; pick one")
    if args.dsn:
        return ExternalWorld(args.dsn, network_optional=True)
    if args.docker:
        return docker_world(network_optional=True)
    return World("certify", network_optional=True)


def cmd_certify(args) -> int:
    """Until the crash matrix lands: bring a world up, print its components, take it down."""
    with _world_from_args(args) as world:
        for name, value in world.components().items():
            print(f"{name:12} {value}")
        for capability, reason in sorted(world.capabilities.missing.items()):
            print(f"{capability:12} not-run: {reason}")
    return 0


def cmd_world(args) -> int:
    from .world import World, describe_state, load_state, save_state, teardown_state
    workspace = Workspace()
    if args.action == "up":
        from .world import state_file
        if state_file(workspace, args.name).exists():
            raise TestHostError(f"a world named {args.name} is already up; `crashproof world down --name {args.name}` first")
        world = World(args.name, workspace=workspace, pg_port=args.port, tie_to_parent=False).up()
        save_state(world)
        state = world.state()
        print(f"world {args.name} is up")
        print(f"  direct:  psql \"{state['postgres']['dsn']}\"")
        if state["toxiproxy"]:
            print(f"  proxied: psql \"{state['toxiproxy']['proxied_dsn']}\"")
            print(f"  toxiproxy API: http://127.0.0.1:{state['toxiproxy']['api_port']}")
        print(f"  clock offset file: {state['clock_file']}")
        return 0
    if args.action == "status":
        print(json.dumps(describe_state(load_state(workspace, args.name)), indent=2))
        return 0
    teardown_state(workspace, args.name)
    print(f"world {args.name} is down")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crashproof", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    certify = sub.add_parser("certify", help="certify an implementation against the barrier suite")
    certify.add_argument("--dsn", help="use an existing server (no clock control, no database crash)")
    certify.add_argument("--docker", action="store_true", help="run the server in a container (testcontainers)")
    certify.set_defaults(run=cmd_certify)

    world = sub.add_parser("world", help="bring a world up or down by hand, to poke at it with psql")
    world.add_argument("action", choices=["up", "down", "status"])
    world.add_argument("--name", default="default")
    world.add_argument("--port", type=int, help="PostgreSQL port (default: a free one)")
    world.set_defaults(run=cmd_world)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TestHostError as exc:
        print(f"crashproof: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
