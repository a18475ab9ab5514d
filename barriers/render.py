"""Renders barriers/PROTOCOL.md from the barrier catalog and the protocol registries, with what certification runs
passed in: the checks, the faults, the reference's migrations and the catalog's scenarios the rules name
(testhost/runs/protocol_page.py passes them and writes the page: this module imports nothing of the project)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Protocol, Sequence

from .catalog import CATALOG, Barrier
from . import schema
from .protocol import (CLOCK_RULES, COUNT_RULES, COUNTS, ENVIRONMENT, MESSAGES, NORMATIVE, OPERATIONS, OUTCOMES, PROBLEMS, PROCESS_RULES,
                       PROTOCOL_VERSION, TIMEOUTS)
from .contract import CLASSES, KIND_MEANING, SPEC, VERSION as CONTRACT_VERSION, settled
from .schema import SCHEMA_RULES

PAGE = Path(__file__).with_name("PROTOCOL.md")


class Fault(Protocol):
    """A fault as the page lists it (testhost/faults/catalog.py FAULTS holds them)."""

    summary: str  # what the host does
    expects: str  # what the implementation must then do (or must not)

    def applies(self, barrier: Barrier) -> str | None:
        """None if the fault can be injected at this barrier, else why not."""


def _fields(fields) -> list[str]:
    if not fields:
        return ["(no fields besides `type`)", ""]
    lines = ["| field | type | required | meaning |", "|---|---|---|---|"]
    lines += [f"| `{f.name}` | {f.type} | {'yes' if f.required else 'no'} | {f.meaning} |" for f in fields]
    return lines + [""]


def _schema_surface() -> list[str]:
    """The exact surface the schema stage expects, from barriers/schema.py."""
    out = ["### The surface the schema stage expects", "",
           f"Roles: `{schema.OWNER}` (migration owner, BYPASSRLS), `{schema.RUNTIME}` (runtime), `{schema.DISPATCHER}` "
           "(dispatcher), all in schema `appsurface_durable`. Table privileges, exactly (a history partition "
           "carries `schedule_history`'s; any other relation, sequence or view: none):", "",
           "| table | runtime |", "|---|---|"]
    out += [f"| `{table}` | {', '.join(sorted(grants.get(schema.RUNTIME, ())))} |"
            for table, grants in schema.TABLE_GRANTS.items()]
    out += ["", "Column privileges, exactly: " + "; ".join(
                f"`{role}` {privilege} ({', '.join(sorted(c for c, p in columns if p == privilege))}) on `{table}`"
                for (table, role), columns in schema.COLUMN_GRANTS.items()
                for privilege in sorted({p for _, p in columns})) + ".",
            "", "EXECUTE, exactly (every other function: the owner only; PUBLIC never): " + "; ".join(
                f"`{function}` by {', '.join(f'`{r}`' for r in sorted(roles))}"
                for function, roles in schema.FUNCTION_GRANTS.items()) + ". Schema USAGE: "
            + ", ".join(f"`{role}`" for role, _ in sorted(schema.SCHEMA_GRANTS)) + ".",
            "", "Policies (forced RLS; the policy's name is free): on "
            + ", ".join(f"`{t}`" for t in sorted(schema.SCOPED)) + " one permissive policy for all commands to the "
            "runtime, USING and WITH CHECK `" + schema.SCOPE_POLICIES[0][3] + "`; on `schedule_dispatch` that with `"
            + schema.QUEUE_POLICIES[0][3] + "`, plus a permissive SELECT policy to the dispatcher USING `true`.",
            "", "Columns the checks read (type families: any integer, any text, `uuid`, `timestamptz`, `json`/`jsonb`):",
            ""]
    out += [f"- `{table}`: " + ", ".join(f"{column} ({family})" for column, family in columns.items())
            for table, columns in schema.READ_COLUMNS.items()]
    return out + [""]


def _faults(faults: Mapping[str, Fault]) -> list[str]:
    """The fault plug-ins (testhost/faults/catalog.py), each with what it does and what it expects of you."""
    from barriers import CATALOG as barriers

    out = ["", "## Faults", "",
           "Each faulted case injects one of these at one hit of one barrier, before the host's reply. A fault that "
           "cannot happen at a barrier is not planned there (`crashproof scenarios --matrix` lists each skip with "
           "its reason).", "",
           "| fault | what the host does | what your implementation must do | barriers |", "|---|---|---|---|"]
    for name, fault in faults.items():
        where = [b.name for b in barriers if fault.applies(b) is None]
        scope = "every barrier" if len(where) == len(barriers) else ", ".join(f"`{b}`" for b in where)
        out.append(f"| `{name}` | {fault.summary} | {fault.expects} | {scope} |")
    return out + [""]


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _counts() -> list[str]:
    """The counts a `process-due` answer may report, from barriers/protocol.py."""
    out = ["### Counts of a pass", "",
           "The value of an `ok` `process-due` answer is an object of counts. Each name below is optional; any other "
           "name is yours and is not read (the reference also reports `noops`, `coalesced`, `fenced`, `aborted`).",
           "", "| count | what the pass did | the host sees it as |", "|---|---|---|"]
    out += [f"| `{c.name}` | {c.meaning} | {c.seen_as} |" for c in COUNTS]
    return out + [""] + [line for rule in COUNT_RULES for line in (rule, "")]


def _problems() -> list[str]:
    """The problem types a refused client command names, from barriers/protocol.py."""
    out = ["### Problem types", "",
           "A client command the scenario expects refused must answer `fail` with an RFC 9457 `problem` whose "
           "`type` ends, as its last segment (after the last `:`, `/` or `#`), in the name the scenario expects; "
           "the reference uses `urn:appsurface-durable:problem:NAME`, any prefix of yours will do. These are every "
           "name a scenario may expect, and so every problem the checks accept (`client-outcomes`, `step-outcomes`):",
           "", "| problem | when |", "|---|---|"]
    out += [f"| `{p.name}` | {p.when} |" for p in PROBLEMS]
    return out + [""]


def _normative(checks: Mapping[str, str], migrations: Sequence[str], deadline_scenarios: Sequence[str],
               deadline_margin_s: float, bridge_clock_scenarios: Sequence[str]) -> list[str]:
    """The rules a certified implementation must follow, then every check with the rule its failure names."""
    out = ["## What a certified implementation must do", "",
           "These rules are normative: each names, in backticks, the check that enforces it. "
           "docs/protocol-notes.md gives the reasons where the spec left a choice.", ""]
    for section in NORMATIVE:
        out += [f"### {section.title}", ""]
        out += ["- " + rule.replace("{migrations}", _names(migrations)).replace("{margin}", f"{deadline_margin_s:g}")
                .replace("{deadline_scenarios}", _names(deadline_scenarios))
                .replace("{bridge_clock_scenarios}", _names(bridge_clock_scenarios) or "none")
                for rule in section.rules]
        out += [""]
    out += ["## The checks", "",
            "Every check certification runs, by the name a report gives it, and the rule its failure names (a spec "
            "sentence, with our reading in parentheses; an adapter-protocol rule of this page; or a harness rule).",
            "", "A faulted case's recovery moves the server clock by `lease_seconds + 1` (twice after a `pause`), and "
            "the steps that follow run on that clock. The TestHost replays the timeline that actually ran in the "
            "model and holds the case to its scenario's fault-free run (`crash-equivalence`) and expectations "
            "(`scenario-expectations`) exactly when the model ends both timelines alike; otherwise both outcomes "
            "are right, the case reports those two checks with `\"skipped\"` (the reason, `ok` true, the model's "
            "differences as evidence) and `model-agreement` alone judges its final state. `crashproof scenarios "
            "--lint` names the steps of a scenario where that happens. A fault inside a pass may stop it before it "
            "decided a schedule it claimed; the recovery then decides it on the moved clock, and the model accepts "
            "either timeline for every claimed schedule whose `schedule-decision-after-commit` (or a later barrier of "
            "its bridge, by the `schedule_id` in the barrier's context) it had not seen in that pass.",
            "", "Each rule's class says why it may fail you (docs/contract-changes.md): "
            + "; ".join(f"`{k}`: {v}" for k, v in KIND_MEANING.items()) + ". The contract version that last "
            "changed a check is beside it.",
            "", "| check | class | since | rule |", "|---|---|---|---|"]
    out += [f"| `{name}` | {_class(name)} | {settled(name)} | {rule.replace('|', '&#124;')} |"
            for name, rule in checks.items()]
    return out + [""]


def _class(name: str) -> str:
    """A rule's class as the checks table shows it: the kind, and the notes a pinned reading cites."""
    rule_class = CLASSES[name]
    notes = "; ".join("note " + n.split(" ", 1)[0] for n in rule_class.notes)
    return f"{rule_class.kind}" + (f" ({notes})" if notes and rule_class.kind != SPEC else "")


def _opening() -> list[str]:
    """The page's title and how the TestHost runs an implementation: processes, clock, outcomes, timeouts."""
    out = [
        "# The crashproof adapter protocol",
        "",
        "<!-- Generated by `python -m testhost.runs.protocol_page protocol` from barriers/catalog.py and "
        "barriers/protocol.py. Do not edit by hand. -->",
        "",
        f"Contract {CONTRACT_VERSION}, wire protocol version {PROTOCOL_VERSION}. This page is all an outside team "
        "needs to make its own implementation of the Durable Schedule protocol v1 certifiable by crashproof, in any "
        "language. The contract is the rules below plus the normative store; docs/contract-changes.md lists every "
        "change since the first published contract, what it can fail, and what an implementation changes for it. "
        "Name the contract you target in your hello (`contract`): a failure of a rule changed after it then says so.",
        "",
        "## How the TestHost runs your implementation",
        "",
        "You give `crashproof certify --impl \"CMD\"` a command line. For each case the TestHost starts it (more than "
        "once when a case needs a second processor or a restart), with these environment variables:",
        "",
        "| variable | meaning |",
        "|---|---|",
        *[f"| `{v.name}` | {v.meaning} |" for v in ENVIRONMENT],
        "",
        "A command of the form `PYTHON -m MODULE ARGS...`, where PYTHON is the interpreter crashproof itself runs "
        "on, is by default forked from a server that has already imported psycopg (starting an interpreter and "
        "importing psycopg costs about 0.2 s of CPU, and a case may start you three times). Your module still runs "
        "from scratch as `__main__` with the same arguments, environment, working directory, standard streams and "
        "new session as a spawned process; its own package is imported afresh in each process. "
        "`--launcher spawn` starts every command as a new process instead; the report says which was used.",
        "",
        "Your process reads newline-delimited JSON on standard input and writes newline-delimited JSON on standard "
        "output, one message per line, each an object with a `type`. Write logs to standard error, never to standard "
        "output. The database already holds the normative schema (the reference's migrations, listed under *Roles and "
        "schema* below), the three roles, and the scope; connect only through the DSNs given, which pass through the "
        "TestHost's proxy whenever the case's fault acts on the network.",
        "",
        "A case is a timeline of operations. After the `hello`, the host sends one `request` at a time and waits for "
        "its `response`. While an operation runs, every barrier you reach is reported with a `barrier` message and "
        "you block until the host's `barrier-reply`. The host may inject a fault before replying: kill you (SIGKILL "
        "to your process group), stop you (SIGSTOP, later SIGCONT, to the group), end your server session while you are stopped inside a "
        "transaction, cut your connections at the proxy, drop the server's replies, or crash "
        "and restart PostgreSQL (*Faults* below). Then it starts a fresh copy of your command to recover, and judges the outcome by "
        "reading the normative tables itself.",
        "",
        "## Processes",
        "",
        *[line for rule in PROCESS_RULES for line in (rule, "")],
        "## Your own clock",
        "",
        *[line for rule in CLOCK_RULES for line in (rule, "")],
        "## Outcomes",
        "",
        *[f"- `{name}`: {meaning}" for name, meaning in OUTCOMES.items()],
        "",
        "Classify honestly: `fail` tells the host nothing was applied; a wrong `fail` is a protocol violation the "
        "checks catch (`outcome-honesty`, under *Answers* below).",
        "",
        "## Timeouts",
        "",
        "| timeout | seconds | measured |",
        "|---|---|---|",
        *[f"| {t.name} | {t.seconds:g} | {t.meaning} |" for t in TIMEOUTS],
        "",
        "A process that exits, writes a line that is not JSON, sends an unknown message type, or misses a timeout "
        "ends its case with the verdict `error` and the reason; the run goes on with the next case (the build "
        "stage's first start ends the run instead: *Processes*). `CRASHPROOF_<NAME>_TIMEOUT_S` in the environment "
        "`crashproof` runs in changes one for that run (`CRASHPROOF_BUILD_TIMEOUT_S=1800` for a longer build).",
        "",
        "## Messages",
        "",
    ]
    return out


def _messages() -> list[str]:
    """Every wire message with its fields and an example."""
    out: list[str] = []
    for message in MESSAGES:
        out += [f"### `{message.type}` ({message.direction})", "", message.meaning + ".", ""]
        out += _fields(message.fields)
        out += ["```json", message.example, "```", ""]
    return out


def _operations() -> list[str]:
    """Every operation, mandatory or optional, with its arguments, value and fallback."""
    out = ["## Operations", "",
           "`process-due` is mandatory. The others are optional: list the ones you implement in `hello`. For any "
           "you do not, the host performs the step itself through the fallback named below, over the normative "
           "schema, and the certificate says so.", ""]
    for op in OPERATIONS:
        out += [f"### `{op.name}` ({'mandatory' if op.mandatory else 'optional'})", "", op.meaning + ".", ""]
        out += _fields(op.args)
        out += [f"Value on `ok`: {op.value}.", ""]
        if op.fallback:
            out += [f"Fallback when not implemented: {op.fallback}.", ""]
        if op.name == "process-due":
            out += _counts()
    return out


def _barriers() -> list[str]:
    """The barrier catalog and where each barrier comes."""
    out = ["## Barriers", "",
           "Report each barrier when your code reaches it. Names are exact. `before-commit` barriers come after the "
           "transaction's last write and before its COMMIT; `after-commit` barriers right after COMMIT returns; "
           "`inside` barriers mid-transaction. A barrier of an operation you offer that you never reach in a "
           "scenario where the reference reaches it fails that case (a planned barrier that never fired). A barrier "
           "of an operation you do not offer is the fallback's: it is neither required of you nor planned, and the "
           "report lists it as skipped with that reason.", "",
           "| barrier | operation | transaction | position | durable if the process dies here |",
           "|---|---|---|---|---|"]
    out += [f"| `{b.name}`{' (spec)' if b.from_spec else ''} | `{b.operation}` | {b.transaction} | {b.position} | "
            f"{b.durable_if_killed_here} |" for b in CATALOG]
    return out


def _work_identity() -> list[str]:
    """How the checks recompute a materialized occurrence's Work identity."""
    out = ["## Deterministic Work identity", "",
           "The checks recompute the Work identity of every materialized occurrence and compare it with your link "
           "and your Work row:", "",
           "```",
           "canonical = scope_id | schedule_id | generation | kind | first_nominal_utc as YYYY-MM-DDTHH:MM:SS.ffffffZ",
           "work_id   = UUIDv8 of the first 16 bytes of SHA-256(\"appsurface-durable/schedule-work/v1|\" + canonical)",
           "            (byte 6: version 8 in the high nibble; byte 8: variant 10 in the two high bits)",
           "idempotency_key = \"schedule-occurrence/v1|\" + canonical",
           "activity  = \"schedule/<schedule_id>/g<generation>/<kind>\"",
           "command   = the generation's target command",
           "```", ""]
    return out


def _own_schema() -> list[str]:
    """What `--migrations DIR` does and the schema stage's rules."""
    out = ["## Certifying your own schema", "",
           "By default the database holds the reference's migrations. A product that ships its own passes them with "
           "`crashproof certify --migrations DIR` (numbered files `0001_name.sql`, `0002_name.sql`, ... without gaps; "
           "only the resulting schema counts, not the file names). The TestHost applies them in order as the "
           "migration owner, after the role recipe, and builds every case's store from them. Before any case runs, "
           "a schema stage checks the result; it is the case `schema-stage` of the report, with one check per rule, "
           "and any finding fails the run (the cases still run and are reported). A directory that is missing or "
           "empty, or a file the server refuses, ends the run at once with a one-line error naming the file and the "
           "server's message, and nothing left behind.", "",
           "| check | class | since | rule |", "|---|---|---|---|",
           *[f"| `{r.name}` | {_class(r.name)} | {settled(r.name)} | {r.rule} |" for r in SCHEMA_RULES], ""]
    return out


def _without_0004() -> list[str]:
    """The `schema-version` case: a store without migration 0004."""
    out = ["## A store without migration 0004", "",
           "Every run whose `--scenario` filter matches `schema-version` (every run without a filter) also runs the "
           "case `schema-version`: your implementation, started as in any case, on a store holding only the "
           "reference's migrations 0001-0003 (Work and Flow, runtime version 3) and the scope `schema-version`. The "
           "host sends `process-due` (and `create` when your hello declares it). Each must answer `fail` with an "
           "`error` whose `message` says why and whose `retriable` is `false` (no retry succeeds before an operator "
           "applies 0004; a missing table or function's SQLSTATE is enough, you need not read the migration "
           "record), report no barrier, and change no row of the store (`schema-version-refused`). The case reaches "
           "no barrier, so no faulted case follows it.", ""]
    return out


def render(checks: Mapping[str, str], faults: Mapping[str, Fault], *, migrations: Sequence[str],
           deadline_scenarios: Sequence[str], deadline_margin_s: float, bridge_clock_scenarios: Sequence[str]) -> str:
    """The page, listing `checks` (every check's rule by its name) and `faults` (by name), naming the reference's
    `migrations` (file names), the `deadline_scenarios` whose lost COMMIT replies are held past the client deadline,
    by `deadline_margin_s` at most, and the `bridge_clock_scenarios` that move the server clock inside a bridge."""
    return "\n".join([*_opening(), *_messages(), *_operations(), *_problems(), *_barriers(), *_faults(faults),
                      *_work_identity(),
                      *_normative(checks, migrations, deadline_scenarios, deadline_margin_s, bridge_clock_scenarios),
                      *_own_schema(), *_schema_surface(), *_without_0004()])
