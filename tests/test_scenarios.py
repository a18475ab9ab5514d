"""Scenarios as data: the catalog loads, and a malformed scenario is refused with the file, step and field."""

import pytest

from scenarios.scenario import ScenarioError, load_catalog, parse, relative, T0
from datetime import timedelta


def test_catalog_has_at_least_twenty_scenarios_covering_the_required_ground():
    scenarios = load_catalog()
    assert len(scenarios) >= 20
    covered = {c for s in scenarios for c in s.covers}
    assert {"at", "after", "every", "anchored", "unanchored", "recovery", "coalesced", "requeue", "update",
            "superseded", "race", "maximum-schedules"} <= covered
    assert {"delete", "clock-behind", "misfire-run-once", "misfire-skip", "clock-anomaly", "runtime-epoch",
            "release-after-recovery", "scope-generation", "retry", "refusal", "cancellation", "claim",
            "idempotency-conflict"} <= covered
    for s in scenarios:
        assert s.description and s.expect, s.name


@pytest.mark.parametrize("text, message", [
    ('[[steps]]\nop = "fly"\n', "op 'fly' is not one of"),
    ('[[steps]]\nop = "create"\nschedule = "a"\n', "create needs spec"),
    ('[[steps]]\nop = "advance"\nseconds = "ten"\n', "seconds has the wrong type"),
    ('[[steps]]\nop = "advance"\nseconds = 1\nhow = "fast"\n', "advance takes no how"),
    ('[[steps]]\nop = "delete"\nschedule = "a"\n', "used before it is created"),
    ('[[steps]]\nop = "create"\nschedule = "a"\nspec = { kind = "at", at = "tomorrow" }\n', r"must look like \+90s"),
    ('steps = [', "not valid TOML"),
    ('description = "x"\n', "no steps"),
    ('[[steps]]\nop = "drain"\n[expect.b]\nworks = 1\n', "expectations for 'b'"),
    # the registry's own checks: booleans are no numbers, choices, files and snapshots, the scenario's own fields
    ('[[steps]]\nop = "advance"\nseconds = true\n', "seconds has the wrong type"),
    ('[[steps]]\nop = "plant-work"\nschedule = "a"\nfirst = "+1s"\n', "used before it is created"),
    ('[[steps]]\nop = "restore"\nname = "nightly"\n', "no snapshot named 'nightly'"),
    ('[[steps]]\nop = "snapshot"\nname = "n"\n[[steps]]\nop = "snapshot"\nname = "n"\n', "taken already"),
    ('[[steps]]\nop = "set-clock"\nat = "+1.5s"\nfreeze = true\n', "whole second"),
    ('[[steps]]\nop = "set-clock"\nat = "noon"\n', r"at: time 'noon' must look like"),
    ('[[steps]]\nop = "process"\nexpect = "maybe"\n', "expect must be one of ok, fail"),
    # the host sends process-due no maximum_schedules below 1 (barriers/PROTOCOL.md, process-due)
    ('[[steps]]\nop = "process"\nmaximum_schedules = 0\n', "maximum_schedules must be a whole number from 1, not 0"),
    ('[[steps]]\nop = "race"\nmaximum_schedules = -2\n', "maximum_schedules must be a whole number from 1, not -2"),
    ('[[steps]]\nop = "process"\nmaximum_schedules = 1.5\n', "maximum_schedules has the wrong type"),
    ('[[steps]]\nop = "process"\nduring = { barrier = "schedule-link-after-commit", op = "update" }\n',
     "during.barrier must be one of schedule-claim-before-commit"),
    ('[[steps]]\nop = "process"\nduring = { barrier = "schedule-decision-before-commit", op = "drain" }\n',
     "during.op must be one of update, delete, complete-work, advance-scope-generation"),
    # after a committed decision only a Work transition may run (it changes eligibility only)
    ('[[steps]]\nop = "process"\n'
     'during = { barrier = "schedule-decision-after-commit", op = "advance-scope-generation" }\n',
     "during.barrier must be one of schedule-claim-before-commit"),
    ('[[steps]]\nop = "process"\nduring = { barrier = "schedule-decision-before-commit", op = "delete" }\n',
     "during: delete needs schedule"),
    ('[[steps]]\nop = "drain"\nwhen = 1\n', "drain takes no when"),
    ('title = "x"\n[[steps]]\nop = "drain"\n', "the scenario has no field title"),
    ('[[steps]]\nop = "create"\nschedule = "a"\nspec = { kind = "at", at = "+1s" }\n[expect.a]\nworks = "one"\n',
     "expect.a.works has the wrong type"),
    ('[[steps]]\nop = "create"\nschedule = "a"\nspec = { kind = "at", at = "+1s" }\n[expect.a]\n'
     'occurrences = [{ generation = 1, kind = "nominal", first = "+1s", last = "+1s", state = "done" }]\n',
     r"expect.a.occurrences\[1\].state must be one of pending, materialized, superseded"),
])
def test_malformed_scenarios_are_refused_clearly(text, message):
    with pytest.raises(ScenarioError, match=message) as caught:
        parse("bad", text)
    assert str(caught.value).startswith("bad")


def test_relative_times():
    assert relative("+90s") == T0 + timedelta(seconds=90)
    assert relative("-5s") == T0 - timedelta(seconds=5)
    assert relative("accepted+5s", T0 + timedelta(seconds=1)) == T0 + timedelta(seconds=6)


def test_a_catalog_folder_replaces_or_joins_the_built_in_one_and_names_the_file_of_an_error(tmp_path):
    import pytest

    (tmp_path / "ours.toml").write_text('[[steps]]\nop = "drain"\n')
    assert [s.name for s in load_catalog([tmp_path])] == ["ours"]
    joined = load_catalog([tmp_path], with_builtin=True)
    assert "ours" in [s.name for s in joined] and len(joined) == len(load_catalog()) + 1
    (tmp_path / "at-single.toml").write_text('[[steps]]\nop = "drain"\n')
    with pytest.raises(ScenarioError, match=r"'at-single' is defined twice: .*catalog/at-single.toml and "
                                            + str(tmp_path / "at-single.toml")):
        load_catalog([tmp_path], with_builtin=True)
    (tmp_path / "broken.toml").write_text('x = 1\n[[steps]\nop = "drain"\n')
    with pytest.raises(ScenarioError, match=str(tmp_path / "broken.toml") + r": not valid TOML: .*line 2"):
        load_catalog([tmp_path])


def test_an_error_names_the_line_of_its_step(tmp_path):
    text = 'description = "x"\n\n[[steps]]\nop = "drain"\n\n[[steps]]\nop = "advance"\nseconds = "ten"\n'
    with pytest.raises(ScenarioError) as caught:
        parse("bad", text, origin="our/bad.toml")
    assert str(caught.value).startswith("our/bad.toml:6: step 2: seconds has the wrong type (str")


def test_docs_scenarios_md_is_rendered_from_the_registry_and_every_example_parses():
    from scenarios.render import PAGE, render
    from scenarios.steps import STEPS

    assert PAGE.read_text() == render(), "docs/scenarios.md is stale: run `python -m scenarios.render`"
    for op, kind in STEPS.items():
        example = parse(f"example-{op}", kind.example)
        assert op in [step.op for step in example.steps], f"the example of {op} does not use it"
        for field in kind.fields:
            assert f"| `{field.name}` |" in PAGE.read_text()

