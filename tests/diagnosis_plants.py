"""Variants of the reference that each plant the cause of one diagnosis of reports/diagnosis.py, with the slice each
runs on: `crashproof certify --impl "python -m mutants --root DIR" --scenario S --case S --jobs 1` (the scenario's
fault-free case) must fail and name the diagnosis in the run's summary (tests/test_diagnosis.py). Made with the
mutants' mechanism (mutants.Edit, mutants.materialize), but not mutants of the catalog: a mutant breaks one spec
sentence and is judged by the check naming it; a plant puts a team's likely mistake in place, whatever it breaks,
and is judged by the diagnosis naming its cause. Every plant also writes each error it answers with to stderr, as
an implementation's log would."""

from __future__ import annotations

from dataclasses import dataclass

from mutants import Edit, Mutant

LOGS_ERRORS = Edit(
    "adapter.py", "    def send(self, message: dict[str, Any]) -> None:\n",
    "    def send(self, message: dict[str, Any]) -> None:\n"
    "        failure = message.get('error') or message.get('problem')\n"
    "        if failure:  # planted for the diagnosis: an implementation's log line\n"
    "            print(f\"error: {failure.get('kind') or failure.get('type')}: \"\n"
    "                  f\"{failure.get('message') or failure.get('detail')}\", file=sys.stderr, flush=True)\n")


@dataclass(frozen=True)
class Plant:
    diagnosis: str  # the name in reports/diagnosis.py DIAGNOSES
    cause: str  # what is planted, in a team's words
    edits: tuple[Edit, ...]
    scenario: str  # the slice: this scenario's fault-free case

    @property
    def mutant(self) -> Mutant:
        return Mutant(f"plant-{self.diagnosis}", "", self.cause, self.edits + (LOGS_ERRORS,), slice=(self.scenario,))


PLANTS: tuple[Plant, ...] = (
    Plant("never-connected",
          "Both DSNs are the implementation's own (a default it was written with), not the environment's: nothing "
          "listens there.",
          (Edit("adapter.py", '        self.runtime_dsn = env["CRASHPROOF_RUNTIME_DSN"]\n'
                              '        self.dispatcher_dsn = env["CRASHPROOF_DISPATCHER_DSN"]\n',
                '        self.runtime_dsn = "host=127.0.0.1 port=1 dbname=durable user=appsurface_durable_runtime"\n'
                '        self.dispatcher_dsn = "host=127.0.0.1 port=1 dbname=durable '
                'user=appsurface_durable_dispatcher"\n'),),
          "at-single"),
    Plant("no-scoped-commit",
          "A `process-due`-only implementation sets the scope with a transaction-local `set_config("
          "'appsurface_durable.scope_id', scope, true)` instead of `set_local_scope`, as one written before protocol "
          "note 24j did: its claims commit, no decision does.",
          (Edit("db.py", "then appsurface_durable.set_local_scope(", "then set_config('appsurface_durable.scope_id', "),
           Edit("db.py", ", ''))\n       end as scope", ", ''), true)\n       end as scope"),
           Edit("adapter.py", '"operations": list(OPERATIONS)', '"operations": ["process-due"]')),
          "at-single"),
    Plant("barrier-reply-ignored",
          "Every barrier-reply is taken for `continue`: a `cancel-pass` goes unread.",
          (Edit("adapter.py", '        if reply.get("action") == "cancel-pass" and self._pass_token is not None:\n',
                "        if False:\n"),),
          "cancel-after-decision"),
    Plant("grid-before-future-anchor",
          "An Every's grid starts at its anchor: the instants before a future anchor (n < 0) are never evaluated.",
          (Edit("evaluator.py", "    n = (to_us(t) - anchor) // step + 1\n",
                "    n = max((to_us(t) - anchor) // step + 1, 0)\n"),),
          "every-future-anchor"),
    Plant("passes-refused",
          "The Work insert names a column the normative Work store does not have (`work_payload`): every bridge "
          "fails in the database, after its decision committed.",
          (Edit("queries/work.sql", "command, activity, payload)\n    values",
                "command, activity, work_payload)\n    values"),),
          "at-single"),
)
BY_DIAGNOSIS = {plant.diagnosis: plant for plant in PLANTS}
