"""What PROTOCOL.md tells outside teams where they asked (the adapter protocol's gaps): each statement is on the page in
words that cannot be read two ways, and where it describes behaviour, the reference or the model behaves so."""

import uuid
from datetime import datetime, timedelta, timezone

from barriers.protocol import BY_OPERATION, NORMATIVE
from reference import WorkStore
from reference.work import WorkRequest
from testhost.faults.catalog import FAULTS
from testhost.judge.gate_model import Generation, Model


def _section(title: str) -> str:
    return " ".join(next(s for s in NORMATIVE if s.title == title).rules)


def test_barriers_on_paths_that_decide_nothing_name_a_lost_lease_and_a_stale_fence_apart():
    text = _section("Barriers on paths that decide nothing")
    # "fence" meant the dispatch revision in one sentence and the epoch/scope generation in the next
    assert "fence" not in text.lower(), text
    assert "finds its lease lost (another dispatch revision" in text
    assert "found the runtime epoch or scope generation stale" in text


def test_the_work_after_acceptance_barrier_is_tied_to_the_writer_returning_not_to_an_acceptance():
    text = _section("Barriers on paths that decide nothing")
    assert "once a Work was accepted" not in text
    assert "fires once the Work writer returned inside the bridge" in text
    assert "a bridge that calls no writer does not reach it" in text


def test_the_page_says_when_a_pass_opens_a_bridge_and_why_it_matters():
    text = _section("Barriers on paths that decide nothing")
    assert "A pass opens a bridge for a schedule right after that schedule's decision committed" in text
    assert "protocol notes 13 and 29i" in text and "`planned-fault-fired`" in text


def test_the_cancel_fault_puts_the_role_proof_and_the_scope_before_the_lock():
    expects = FAULTS["cancel"].expects
    assert "first statement" not in expects  # the proof and the scope come first (protocol note 32d)
    assert "the role proof and `set_local_scope` come before it" in expects and "protocol note 32d" in expects
    assert "`FOR UPDATE`, not `NOWAIT` or `SKIP LOCKED`" in expects


def test_process_due_says_what_a_bad_argument_gets():
    fields = {f.name: f.meaning for f in BY_OPERATION["process-due"].args}
    assert "whole number from 1 only" in fields["maximum_schedules"]
    assert "must be refused" in fields["lease_seconds"] and "must be refused" in fields["lease_owner"]
    answers = _section("Answers")
    assert "answers `fail` and changes no row" in answers and "no check reads what you answer to 0" in answers


def test_complete_work_has_its_rules():
    text = _section("Work transitions")
    for words in ("`terminal_at_utc`", "Terminal is final", "A retry after an unknown COMMIT never reaches you as a "
                  "repeat", "`attempt` is yours", "Their context is yours", "`work-terminal-before-commit`"):
        assert words in text, words


def test_the_model_keeps_a_terminal_work_terminal():
    """What `model-agreement` holds an implementation to, as the page says: a Work moved back stays terminal."""
    t = datetime(2031, 3, 3, tzinfo=timezone.utc)
    model = Model()
    model.create("s", Generation(1, "every", t, every=timedelta(minutes=1), anchor=t))
    model.pass_(t + timedelta(minutes=1, seconds=1))
    model.work("s", 1, "succeeded")
    model.work("s", 1, "running")
    assert [o.work for o in model.schedules["s"].occurrences] == ["succeeded"]


def test_the_reference_work_store_refuses_a_transition_out_of_a_terminal_state_and_changes_nothing(store):
    work = WorkStore(store.runtime_dsn, "tenant-a")
    try:
        request = WorkRequest(uuid.uuid4(), "key-terminal", "cmd", "activity", {})
        work.enqueue(request)
        done = work.transition(request.work_id, "succeeded")
        assert done["terminal_at_utc"] is not None
        refused = work.transition(request.work_id, "running")
        assert refused.type.endswith("invalid-state")
        assert work.get(request.work_id) == done
    finally:
        work.close()


def test_skip_over_a_held_slot_is_stated():
    text = _section("Time: instants, lateness, recovery")
    assert "Under `skip` a range is skipped also while the QueueOne slot is held" in text
    assert "protocol note 5a" in text


def test_the_certify_guide_quotes_the_matrix_times_crash_matrix_records_and_says_how_to_measure():
    from pathlib import Path
    docs = Path(__file__).parent.parent / "docs"
    guide, recorded = (docs / "certify-your-implementation.md").read_text(), (docs / "crash-matrix.md").read_text()
    assert "about two minutes" not in guide
    for figure in ("`c16743c`", "1,295 cases in 133 s", "1,229", "146 s"):
        assert figure in guide and figure in recorded, figure
    assert "forked" in guide and "spawned" in guide and "crashproof scenarios --matrix --impl" in guide
