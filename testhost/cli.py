"""The `crashproof` command line."""

from __future__ import annotations

import argparse
import json
import sys

from reports import counted
from scenarios.scenario import ScenarioError

from testhost.world.workspace import Workspace

from .errors import TestHostError

EXIT_CODES = """exit codes:
  0    every planned case passed
  1    the implementation failed: a check, the adapter protocol, or a case that could not run
  2    usage or configuration error (one line on stderr, no report; nothing ran, unless the server
       refused a --migrations file)
  3    the harness itself failed (`error` verdicts caused by the harness; every other case passed)
  130  interrupted by SIGINT, 143 by SIGTERM, 129 by SIGHUP: worlds torn down, partial report written
"""


def _selection(args) -> dict:
    """The filters and case selection of certify, as Options fields."""
    from pathlib import Path

    from testhost.runs.options import failed_case_ids
    cases = list(args.case or [])
    if args.rerun_failed:
        try:
            cases += failed_case_ids(Path(args.rerun_failed))
        except ValueError as exc:
            raise TestHostError(str(exc)) from None
    return {"scenario": args.scenario, "barrier": args.barrier, "fault": args.fault, "cases": cases,
            "fail_fast": args.fail_fast, "catalog": [Path(folder) for folder in args.catalog or []],
            "with_builtin": args.with_builtin}


def _jobs(value: int | None) -> int:
    from testhost.runs.options import default_jobs
    if value is not None and value < 1:
        raise TestHostError(f"--jobs must be at least 1, not {value}")
    return value or default_jobs()


def _world_options(args) -> dict:
    """Where the worlds come from and what schema and launcher the cases use, as Options fields (certify and
    scenarios --matrix alike: each changes the census)."""
    from pathlib import Path
    if args.dsn and args.docker:
        raise TestHostError("--dsn and --docker exclude each other; pick one")
    if args.with_builtin and not args.catalog:
        raise TestHostError("--with-builtin adds the built-in scenarios to a --catalog DIR; give one")
    return {"dsn": args.dsn, "docker": args.docker, "launcher": args.launcher,
            "migrations": Path(args.migrations) if args.migrations else None}


def _clock_offset(value: str | None):
    """--impl-clock-offset DURATION, or a one-line usage error."""
    if value is None:
        return None
    from scenarios.instances import DurationError, parse_duration
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise TestHostError(f"--impl-clock-offset: {exc}") from None


def _require_engine(args) -> None:
    if args.docker:
        from testhost.world.docker_world import require_engine
        require_engine()  # a clear error, before any worker starts, where no engine answers


def cmd_certify(args) -> int:
    from pathlib import Path

    from testhost.runs.certify import certify
    from testhost.runs.options import Options
    from testhost.runs.shard import parse as parse_shard
    worlds = _world_options(args)
    jobs = _jobs(args.jobs)
    selection = _selection(args)
    if args.rerun_failed and not selection["cases"]:
        print(f"nothing to rerun: every case in {args.rerun_failed} passed")
        return 0
    _require_engine(args)
    options = Options(command=args.impl or Options.command, report_dir=Path(args.report_dir), jobs=jobs,
                      repeat=args.repeat, seed=args.seed, shard=parse_shard(args.shard) if args.shard else None,
                      impl_clock_offset=_clock_offset(args.impl_clock_offset), **worlds, **selection)
    try:
        code, _ = certify(options)
    except ValueError as exc:
        raise TestHostError(str(exc)) from None
    return code


def cmd_mutants(args) -> int:
    from pathlib import Path

    from testhost.runs.options import Options
    from testhost.runs.mutation import run_mutants
    try:
        code, _ = run_mutants(Options(report_dir=Path(args.report_dir), jobs=_jobs(args.jobs), scenario=args.scenario),
                              args.mutant, exhaustive=not args.slice_only, impl=args.impl,
                              mutants_dir=Path(args.mutants) if args.mutants else None,
                              root=Path(args.root) if args.root else None, all_cases=args.all_cases)
    except ValueError as exc:
        raise TestHostError(str(exc)) from None
    return code


def cmd_variants(args) -> int:
    from pathlib import Path

    from testhost.runs.options import Options
    from testhost.runs.variation import run_variants
    jobs = _jobs(args.jobs)
    try:
        code, _ = run_variants(Options(report_dir=Path(args.report_dir), jobs=jobs), args.variant,
                               slice_only=args.slice_only, explore=args.explore)
    except ValueError as exc:
        raise TestHostError(str(exc)) from None
    return code


def cmd_barriers(args) -> int:
    from barriers import CATALOG
    for b in CATALOG:
        print(f"{b.name:34} {b.transaction:17} {b.position:13} {'spec' if b.from_spec else '    '}  "
              f"{b.durable_if_killed_here}")
    return 0


def cmd_coverage(args) -> int:
    from testhost.runs import coverage
    wrong = coverage.problems()
    if wrong:
        raise TestHostError(f"docs/certification.md is not true ({counted(len(wrong), 'problem')}; tests/test_certification.py "
                            f"names them), first: {wrong[0]}")
    found = coverage.summary()
    print(coverage.headline(found))
    for klass in coverage.CLASSES:
        print(f"  {klass:14} {found['counts'][klass]:3}")
    if found["edges"]:
        print("edges the protocol notes declare without their proof (testhost/runs/edges.py):")
        for name, missing in found["edges"]:
            print(f"  {name}: {'; '.join(missing)}")
    if args.unproven and found["unproven"]:
        print("checked without a mutant proving the check catches a violation:")
        for sentence, missing in found["unproven"]:
            print(f"  {sentence}\n      {'; '.join(missing)}")
    if found["gaps"]:
        print("gaps (not enforced until closed):")
        for sentence, group, text in found["gaps"]:
            print(f"  [{group}] {sentence}\n      {text}")
    if args.shapes and found["shapes"]:
        print("caught only in some shapes:")
        for sentence, text in found["shapes"]:
            print(f"  {sentence}\n      {text}")
    return 0


def cmd_scenarios(args) -> int:
    from pathlib import Path

    from scenarios.scenario import load_catalog
    folders = [Path(folder) for folder in args.catalog or []]
    from scenarios.matrix import select
    scenarios = select(load_catalog(folders, args.with_builtin), args.scenario)
    if args.action == "import":
        return cmd_import(args)
    if args.lint:
        from testhost.runs.lint import lint
        warnings = [w for s in scenarios for w in lint(s)]
        for warning in warnings:
            print(f"warning: {warning.line()}")
        print(f"{counted(len(warnings), 'warning')} in {counted(len(scenarios), 'scenario')}")
        return 1 if warnings and args.strict else 0
    if not args.matrix:
        for s in scenarios:
            print(f"{s.name:32} {len(s.steps):3} step{'s' * (len(s.steps) != 1)}  {', '.join(s.covers)}")
            print(f"{'':32} {s.description}")
            for label, instance in s.instances.items():
                print(f"{'':32} instance {label}: {instance.to_json()}")
        return 0
    from testhost.runs.options import Options
    from testhost.runs.stages import census
    worlds = _world_options(args)
    _require_engine(args)
    failed: list[dict] = []
    try:
        plans, skipped = census(Options(command=args.impl or Options.command, scenario=args.scenario,
                                        catalog=folders, with_builtin=args.with_builtin, **worlds), failed)
    except ValueError as exc:
        raise TestHostError(str(exc)) from None
    for case in failed:
        print(f"fault-free {case['id']}: {case['verdict']}: {case['reason']}")
    print(f"{counted(len(plans), 'case')} planned")
    for plan in plans:
        print(f"  case {plan.id}")
    print(f"{counted(len(skipped), 'combination')} skipped")
    for skip in skipped:
        print(f"  skip {skip.scenario}/{skip.barrier}/{skip.fault}: {skip.reason}")
    return 1 if failed else 0


def cmd_explore(args) -> int:
    from pathlib import Path

    from testhost.runs.explore import Options, explore
    duration = None
    if args.duration:
        from scenarios.instances import DurationError, parse_duration
        try:
            duration = parse_duration(args.duration).total_seconds()
        except DurationError as exc:
            raise TestHostError(f"--duration: {exc}") from None
        if duration <= 0:
            raise TestHostError("--duration must be positive, e.g. 10m")
    if args.hostile is not None and args.hostile < 0:
        raise TestHostError("--hostile must be 0 (no hostile phase) or more")
    if args.replay_hostile:
        from testhost.runs.hostile_phase import replay
        return replay(Path(args.replay_hostile), args.impl)  # the file's own --impl unless one is given
    worlds = _world_options(args)
    _require_engine(args)
    code, _ = explore(Options(command=args.impl or Options.command, profile=args.profile, seed=args.seed,
                              max_examples=args.max_examples, duration_s=duration, hostile=args.hostile,
                              jobs=args.jobs if args.jobs is not None else 1,
                              out=Path(args.out), report_dir=Path(args.report_dir), **worlds))
    return code


def cmd_import(args) -> int:
    from pathlib import Path

    from testhost.runs.scenario_import import import_scenario
    if not args.file:
        raise TestHostError("scenarios import needs a FILE (a scenario explore wrote)")
    catalog = Path(args.catalog[0]) if args.catalog else None
    target = import_scenario(Path(args.file), catalog, args.impl)
    print(f"imported {args.file} as {target}")
    return 0


def cmd_world(args) -> int:
    from testhost.world.worlds import World, describe_state, load_state, save_state, teardown_state
    workspace = Workspace()
    if args.action == "up":
        from testhost.world.worlds import state_file
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
    if teardown_state(workspace, args.name) is None:
        print(f"world {args.name} is not up; nothing to do")  # clean-up steps run it unconditionally
        return 0
    print(f"world {args.name} is down")
    return 0


def cmd_report(args) -> int:
    from pathlib import Path

    from reports import ReportError, certificate, compare, diagnosis, render, report, text
    try:
        if args.action == "render":
            for path in render.render(Path(args.dir), render.parse_formats(args.format)):
                print(path)
        elif args.action == "show":
            print(text.case_text(text.find(report.load(Path(args.dir)).report, args.case)))
        elif args.action == "diff":
            changes = compare.diff(report.load(Path(args.old)), report.load(Path(args.new)))
            print("\n".join(changes.lines()))
            return 1 if changes.new_failures else 0
        elif args.action == "merge":
            merged = compare.merge([report.load(Path(d)) for d in args.dirs], Path(args.out))
            out = report.write(merged, Path(args.out))
            render.render(out.parent)
            s = merged["summary"]
            print(f"merged {counted(len(args.dirs), 'report')}: {counted(s['cases'], 'case')}, {s['passed']} passed, {s['failed']} failed, "
                  f"{s['error']} error, {s['not_run']} not run; report: {out}")
            for line in diagnosis.text(merged):  # the merged run's, as certify ends a run
                print(line)
        elif args.action == "sign":
            print(certificate.sign(Path(args.dir), Path(args.key)))
        else:
            for line in certificate.verify(Path(args.dir), args.allowed_signers, args.signer):
                print(line)
    except ReportError as exc:
        raise TestHostError(str(exc)) from None
    return 0


class _Version(argparse.Action):
    """--version: the package's version and the suite version of the built-in catalog."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        from scenarios.scenario import load_catalog

        from testhost.runs.run_report import suite_version
        try:
            package = version("crashproof")
        except PackageNotFoundError:
            package = "unknown (not installed)"
        print(f"crashproof {package}; suite {suite_version(load_catalog())} (built-in catalog)")
        parser.exit()


def _catalog_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", action="append", metavar="DIR", help="scenario files (*.toml) of your own, "
                        "instead of the built-in catalog (repeatable); the suite version hashes the catalog that ran")
    parser.add_argument("--with-builtin", action="store_true", help="with --catalog: the built-in scenarios too")


def _world_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--migrations", metavar="DIR", help="the implementation's own schema: numbered .sql "
                        "migrations applied as the migration owner instead of the reference's (certify: a schema "
                        "stage checks them before any case runs)")
    parser.add_argument("--dsn", help="use an existing server (no clock control: cases are not-run)")
    parser.add_argument("--docker", action="store_true", help="run the server in a container (testcontainers)")
    parser.add_argument("--launcher", choices=["fork-server", "spawn"], default="fork-server",
                        help="how a `<this python> -m MODULE` implementation starts: forked from a server that "
                        "has imported psycopg already (default), or spawned afresh like every other command")


def _certify_command(sub) -> None:
    """`crashproof certify` and its arguments."""
    certify = sub.add_parser("certify", help="certify an implementation against the barrier suite", epilog=EXIT_CODES
                             + "\nSIGTERM, SIGINT or SIGHUP stop a run: cases in flight are abandoned, every world "
                             "and process\nis torn down, and a partial report (\"interrupted\": true) is written; a "
                             "second signal exits at once.\nAdapter logs: REPORT_DIR/logs/<case id>/<instance>.stderr",
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    certify.add_argument("--impl", help="command line of the implementation's adapter (default: the reference)")
    certify.add_argument("--report-dir", default="report", help="where report.json and logs/ go (default: report)")
    certify.add_argument("--jobs", type=int, help="worlds side by side, at least 1 (default: cores + 1)")
    certify.add_argument("--scenario", action="append", help="only scenarios matching these globs (comma-separated, "
                         "repeatable)")
    certify.add_argument("--barrier", action="append", help="only these barriers (globs, comma-separated, repeatable)")
    certify.add_argument("--fault", action="append", help="only these faults (kill, disconnect, lost-commit-reply, "
                         "db-crash, pause, stall; comma-separated, repeatable)")
    certify.add_argument("--case", action="append", metavar="ID", help="only this case, by its id in a report (e.g. "
                         "at-single/schedule-link-after-commit/kill/1); repeatable")
    certify.add_argument("--rerun-failed", metavar="REPORT", help="only the cases that did not pass in REPORT "
                         "(report.json or its folder)")
    certify.add_argument("--fail-fast", action="store_true", help="stop at the first case that fails or errs "
                         "(clean teardown, partial report)")
    _catalog_arguments(certify)
    certify.add_argument("--repeat", type=int, default=1, help="run each faulted case N times")
    certify.add_argument("--seed", type=int, default=0, help="seed for the case order")
    certify.add_argument("--shard", metavar="I/N", help="run only the I-th of N deterministic slices of the planned "
                         "cases (one per CI machine); `crashproof report merge` joins the N reports")
    certify.add_argument("--impl-clock-offset", metavar="DURATION", help="run every implementation process with "
                         "its OS clock skewed by DURATION through libfaketime (+1d, -36h, 90s, -1d2h); the report "
                         "and certificate state whether the skew took effect (PROTOCOL.md, \"Your own clock\")")
    _world_arguments(certify)
    certify.set_defaults(run=cmd_certify)


def _mutants_command(sub) -> None:
    """`crashproof mutants` and its arguments."""
    mutants = sub.add_parser("mutants", help="run the matrix against every mutant of the reference; prints which "
                             "cases caught each one and under which rule, then the mutation score")
    mutants.add_argument("--report-dir", default="report", help="where mutants.json goes (default: report)")
    mutants.add_argument("--jobs", type=int, help="worlds side by side (default: cores + 1)")
    mutants.add_argument("--mutant", help="only mutants matching these comma-separated globs")
    mutants.add_argument("--slice-only", action="store_true", help="run only each mutant's slice (and the reference "
                         "on the same slices), not the rest of the matrix for a mutant the slice misses")
    mutants.add_argument("--impl", help="an implementation's command line; its mutants are the patches in --mutants "
                         "(default: the reference and its built-in mutants)")
    mutants.add_argument("--mutants", help="a folder of *.patch files, each planting one bug in --impl's source and "
                         "naming in its preamble the Rule that must catch it (see examples/go/mutants)")
    mutants.add_argument("--root", help="the folder the patches apply to (default: the parent of --mutants)")
    mutants.add_argument("--scenario", action="append", help="only scenarios matching these globs, comma-separated "
                         "and repeatable (census, slices and matrix)")
    mutants.add_argument("--all-cases", action="store_true", help="run every case of the matrix for every mutant, "
                         "not only until it is killed")
    mutants.set_defaults(run=cmd_mutants)


def _variants_command(sub) -> None:
    """`crashproof variants` and its arguments."""
    legal = sub.add_parser("variants", help="certify every legal variant of the reference (another way the contract "
                           "allows, variants/): each must pass the whole matrix, and a failure is reported as a harness "
                           "defect; one line per variant (docs/variants.md)")
    legal.add_argument("--variant", help="only variants matching these comma-separated globs")
    legal.add_argument("--jobs", type=int, help="worlds side by side (default: cores + 1)")
    legal.add_argument("--report-dir", default="report/variants", help="where variants.json and each variant's "
                       "report go (default: report/variants)")
    legal.add_argument("--explore", action="store_true", help="also run `crashproof explore --profile ci` on each "
                       "variant, which must find nothing (`make variants` does)")
    legal.add_argument("--slice-only", action="store_true", help="each variant on its slice only (the cases where its "
                       "difference shows) instead of the whole matrix")
    legal.set_defaults(run=cmd_variants)


def _report_command(sub) -> None:
    """`crashproof report` and its actions."""
    rep = sub.add_parser("report", help="render, show, compare, merge, sign and verify reports (from report.json)")
    actions = rep.add_subparsers(dest="action", required=True)
    rendering = actions.add_parser("render", help="write report.html, report.md, junit.xml and certificate.json "
                                   "beside DIR/report.json")
    rendering.add_argument("dir")
    rendering.add_argument("--format", help="comma-separated: html,md,junit,certificate (default: all)")
    showing = actions.add_parser("show", help="one case's timeline, checks and evidence in the terminal")
    showing.add_argument("dir")
    showing.add_argument("case", help="the case id, as report.md and the HTML show it")
    diffing = actions.add_parser("diff", help="cases whose verdict changed; exits 1 on a new failure")
    diffing.add_argument("old")
    diffing.add_argument("new")
    merging = actions.add_parser("merge", help="one report (and its renderings) from reports of disjoint selections "
                                 "of the same suite and implementation")
    merging.add_argument("out")
    merging.add_argument("dirs", nargs="+")
    signing = actions.add_parser("sign", help="sign DIR/certificate.json with an SSH key (ssh-keygen -Y sign)")
    signing.add_argument("dir")
    signing.add_argument("--key", required=True, help="SSH private key file")
    verifying = actions.add_parser("verify", help="check DIR/certificate.json against DIR/report.json (and its "
                                   "signature, given the allowed signers)")
    verifying.add_argument("dir")
    verifying.add_argument("--allowed-signers", help="ssh-keygen allowed-signers file of trusted keys")
    verifying.add_argument("--signer", help="the principal the signature must be from")
    rep.set_defaults(run=cmd_report)


def _listing_commands(sub) -> None:
    """`crashproof barriers` and `crashproof coverage`."""
    listing = sub.add_parser("barriers", help="list the barrier catalog")
    listing.set_defaults(run=cmd_barriers)
    cover = sub.add_parser("coverage", help="how many spec sentences certification enforces (docs/certification.md): "
                           "the count per class, and every known gap")
    cover.add_argument("--shapes", action="store_true", help="also list the sentences caught only in some shapes")
    cover.add_argument("--unproven", action="store_true",
                       help="also list the sentences checked without a mutant proving it, and what each lacks")
    cover.set_defaults(run=cmd_coverage)


def _scenarios_command(sub) -> None:
    """`crashproof scenarios` and its arguments."""
    scen = sub.add_parser("scenarios", help="list the scenario catalog; `scenarios import FILE` adds a file to it")
    scen.add_argument("action", nargs="?", choices=["import"], help="import FILE into the catalog (the first "
                      "--catalog DIR, else the built-in one) once its case passes on the reference and, with --impl, "
                      "fails on that implementation")
    scen.add_argument("file", nargs="?", help="with import: the scenario file (e.g. one `crashproof explore` wrote)")
    scen.add_argument("--matrix", action="store_true", help="run the fault-free census and list the matrix, with "
                      "every skipped combination and why, and each fault-free case that did not pass (then exit 1)")
    scen.add_argument("--lint", action="store_true", help="warn (one line per step, with its file) where a fault's "
                      "recovery, which moves the server clock by lease_seconds + 1, changes what the model says the "
                      "scenario ends in: faulted cases there are not compared with the fault-free run (exit 0)")
    scen.add_argument("--strict", action="store_true", help="with --lint: exit 1 when there is a warning")
    scen.add_argument("--impl", help="implementation to take the census of (default: the reference)")
    scen.add_argument("--scenario", action="append", help="only scenarios matching these globs (comma-separated, "
                      "repeatable)")
    _catalog_arguments(scen)
    _world_arguments(scen)
    scen.set_defaults(run=cmd_scenarios)


def _explore_command(sub) -> None:
    """`crashproof explore` and its arguments."""
    exploring = sub.add_parser("explore", help="generated timelines with drawn faults against an implementation; "
                               "each failure shrunk to a scenario file", epilog=EXIT_CODES,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    exploring.add_argument("--impl", help="command line of the implementation's adapter (default: the reference)")
    from testhost.runs.explore_profiles import PROFILES
    exploring.add_argument("--profile", default="ci", choices=list(PROFILES), help="; ".join(
        f"{p.name}: {p.summary}" for p in PROFILES.values()))
    exploring.add_argument("--seed", type=int, help="the first job's seed (job i takes seed + i)")
    exploring.add_argument("--max-examples", type=int, help="programs in all, instead of the profile's")
    exploring.add_argument("--duration", help="stop after this long (e.g. 10m, 1h), instead of the profile's budget")
    exploring.add_argument("--jobs", type=int, help="worlds side by side, one search each (default 1)")
    exploring.add_argument("--out", default="explore-found", help="where each failure's scenario file and program go")
    exploring.add_argument("--report-dir", default="explore-report", help="where report.json and logs/ go")
    exploring.add_argument("--hostile", type=int, help="hostile calls in all, instead of the profile's (0: none)")
    exploring.add_argument("--replay-hostile", metavar="FILE", help="send the hostile call a failed explore wrote "
                           "(hostile-*.json) to --impl (default: the file's own) again, judge it, and exit 0 when it "
                           "is refused as it must be")
    exploring.add_argument("--catalog", action="append", help=argparse.SUPPRESS)
    exploring.add_argument("--with-builtin", action="store_true", help=argparse.SUPPRESS)
    _world_arguments(exploring)
    exploring.set_defaults(run=cmd_explore)


def _world_command(sub) -> None:
    """`crashproof world` and its arguments."""
    world = sub.add_parser("world", help="bring a world up or down by hand, to poke at it with psql")
    world.add_argument("action", choices=["up", "down", "status"])
    world.add_argument("--name", default="default")
    world.add_argument("--port", type=int, help="PostgreSQL port (default: a free one)")
    world.set_defaults(run=cmd_world)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crashproof", description=__doc__, epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="print the package and suite versions")
    sub = parser.add_subparsers(dest="command", required=True)
    _certify_command(sub)
    _mutants_command(sub)
    _variants_command(sub)
    _report_command(sub)
    _listing_commands(sub)
    _scenarios_command(sub)
    _explore_command(sub)
    _world_command(sub)
    return parser


_CONTROLLERS = (cmd_certify, cmd_mutants, cmd_explore, cmd_variants)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.run in _CONTROLLERS:  # runs that start worlds and workers: nothing of them may outlive this process
            from testhost.world.orphans import watched_run
            from testhost.world.workspace import default_root
            with watched_run(default_root() / "worlds"):
                return args.run(args)
        return args.run(args)
    except (TestHostError, ScenarioError) as exc:
        print(f"crashproof: error: {exc}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, TestHostError) else 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
