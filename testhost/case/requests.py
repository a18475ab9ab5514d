"""A case's requests to the implementation: each one asked, its answer kept with what committed meanwhile, and the
counting window around every `process-due` request (the committed facts read before and after, for the counts)."""

from __future__ import annotations

import threading

from testhost.impl.implementation import AdapterProtocolError, Implementation, Response
from testhost.judge.pass_windows import COUNT_FACTS, counts_not_compared


class Requests:
    """What the case asks its implementation, and the windows the pass counts are judged over."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case
        self.asking: dict[str, dict] = {}  # per instance, the request in flight
        self.window: dict | None = None  # the `process-due` request's window in force
        self._window_lock = threading.Lock()
        self.expecting = False  # a pass whose step expects an answer (a refused lease) is being asked
        self.passes_asked = 0  # process-due requests sent so far, to tell a stretch in which none was
        self.protocol_error: AdapterProtocolError | None = None  # raised in a racing thread, re-raised by the case

    def respond(self, impl: Implementation, op: str, request: dict) -> None:
        """Ask and note the answer, keeping an adapter protocol error for the case (a racing thread's)."""
        try:
            self.note_response(self.ask(impl, op, request), op, impl.label)
        except AdapterProtocolError as exc:
            self.protocol_error = exc

    def ask(self, impl: Implementation, op: str, args: dict) -> Response:
        """One request to an implementation, kept in the record's `answers` with what committed while it ran."""
        case = self.case
        counting = op == "process-due"
        if counting:
            self._open_window(args)
        asked = self.asking[impl.label] = {"instance": impl.label, "op": op, "committed": [], "faulted": None}
        response = None
        try:
            response = impl.request(op, args)
        finally:
            self.asking.pop(impl.label, None)
            if counting:
                self._close_window(impl, response)
        case.facts.answers.append({**asked, "outcome": response.outcome, "error": response.error,
                                   "problem": response.problem, "died": response.died,
                                   "expected_refusal": self.expecting,
                                   # answered after a fault fired and before its recovery healed the world
                                   "in_fault": case.injection is not None and not case.healed})
        return response

    def note_response(self, response: Response, op: str, label: str = "A") -> None:
        """A response on the timeline, under the operation that asked it and the instance that answered."""
        self.case.note("response", instance=label, op=op, outcome=response.outcome, value=response.value,
                       problem=response.problem, error=response.error)

    def _during(self) -> str | None:
        """Which part of the case runs now: a scenario step, the recovery, the final drain or a settle."""
        for event in reversed(self.case.facts.timeline):
            if event["event"] == "step":
                return f"step {event['index'] + 1} ({event['op']})"
            if event["event"] in ("recovery", "final-drain", "settle"):
                return event["event"]
        return None

    def _open_window(self, args: dict | None = None) -> None:
        """A `process-due` request is about to be sent: read the facts first unless another pass is in flight."""
        with self._window_lock:
            if self.window is None:
                before, leases = self._window_facts()
                self.window = {"before": before, "answers": [], "faults": [], "during": self._during(),
                               "in_flight": 0, "leases_before": leases, "requests": [],
                               # no fault yet in this case, and no answer the step expects (a refused lease)
                               "clean": self.case.injection is None and not self.expecting}
            self.window["in_flight"] += 1
            self.window["requests"].append(dict(args or {}))
            self.passes_asked += 1

    def _window_facts(self) -> tuple[dict, dict]:
        """The counts' facts and, per dispatch row, its lease state and generation (to tell a lease a pass took and
        left held), in one statement."""
        with self.case.owner() as conn:
            row = dict(conn.execute("select " + ", ".join(f"({sql})::bigint as {name}"
                                                          for name, sql in COUNT_FACTS.items())
                                    + ", (select coalesce(jsonb_object_agg(dispatch_id::text, jsonb_build_array("
                                      "lease_state, lease_generation)), '{}') from "
                                      "appsurface_durable.schedule_dispatch) as leases_").fetchone())
        leases = row.pop("leases_")
        return row, {d: (s, g) for d, (s, g) in leases.items()}

    def _close_window(self, impl: Implementation, response: Response | None) -> None:
        """A `process-due` answer came (or none: the request broke): the last one in flight reads the facts again."""
        with self._window_lock:
            window = self.window
            window["answers"].append({"instance": impl.label, "outcome": response.outcome if response else "none",
                                      "value": response.value if response else None})
            window["in_flight"] -= 1
            if window["in_flight"]:
                return
            self.window = None
            window["clean"] = window["clean"] and self.case.injection is None
            try:
                window["after"], window["leases_after"] = self._window_facts()
            except Exception as exc:  # noqa: BLE001 - the facts are unknown; the window is not compared
                window["after"], window["unread"] = None, f"{type(exc).__name__}: {exc}"
            self.case.facts.count_windows.append(window)
        reason = counts_not_compared(window)
        if reason:
            self.case.note("counts-not-compared", reason=reason, during=window["during"],
                           instances=[a["instance"] for a in window["answers"]])
