"""The reference's error hierarchy; driver errors are translated here, in one place, and raised `from`.

Retriable errors mean the transaction was aborted (or its commit outcome is unknown) and a bounded
retry may follow after rollback. Everything else is definite and must not be retried blindly.
"""

from __future__ import annotations

import psycopg

# SQLSTATE classes and codes after which a bounded retry is correct.
RETRIABLE_CLASSES = ("08", "40", "53")
RETRIABLE_CODES = {"57P01", "57P02", "57P03", "57014", "55P03"}


class DurableError(Exception):
    """Root of every error the reference raises."""

    retriable = False


class RetriableError(DurableError):
    """Timeout, disconnect or a retriable SQLSTATE: the transaction was rolled back; retry is allowed."""

    retriable = True

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class CommitOutcomeUnknown(RetriableError):
    """The connection failed during COMMIT: the server may or may not have committed (indefinite)."""


class AccessDenied(DurableError):
    """The role lacks a privilege (SQLSTATE 42501). Not retriable."""


class BridgeRoleError(DurableError):
    """The connection's current_user is not the configured runtime role. Not retriable."""


class PassInterrupted(DurableError):
    """A definite failure after a transaction of the same pass committed (its claim at least): the pass is partly
    applied, so its caller hears `unknown`, retriable as the failure is."""

    def __init__(self, cause: DurableError):
        super().__init__(f"after this pass committed its claim: {cause}")
        self.cause = cause
        self.retriable = cause.retriable


class SchemaNotReady(DurableError):
    """A migration this runtime version needs is missing, or the runtime version does not admit the call."""


class MigrationRefused(DurableError):
    """A migration would run twice, backwards, out of order, or differs from what was applied."""


class HistoryPartitionMissing(DurableError):
    """No schedule_history partition covers the server's current month."""


class LeaseLost(DurableError):
    """Fenced: the dispatch revision changed since this processor's claim, so it must not write."""


class IdempotencyConflict(DurableError):
    """A stored link or Work differs from the deterministic identity derived for the same occurrence."""


class DatabaseError(DurableError):
    """Any other definite database failure."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


def translate(exc: psycopg.Error, *, during_commit: bool = False) -> DurableError:
    """Map a driver error to the hierarchy by SQLSTATE; a lost connection has none."""
    sqlstate = getattr(exc, "sqlstate", None)
    message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if sqlstate is None and isinstance(exc, psycopg.OperationalError):
        kind = CommitOutcomeUnknown if during_commit else RetriableError
        return kind(f"connection lost: {message}")
    if sqlstate == "42501":
        return AccessDenied(message)
    if sqlstate == "23514" and "no partition of relation \"schedule_history\"" in message:
        return HistoryPartitionMissing(
            f"{message}; run SELECT appsurface_durable.ensure_schedule_history_partitions() as the migration owner")
    if sqlstate and (sqlstate[:2] in RETRIABLE_CLASSES or sqlstate in RETRIABLE_CODES):
        kind = CommitOutcomeUnknown if during_commit and sqlstate[:2] == "08" else RetriableError
        return kind(message, sqlstate)
    return DatabaseError(message, sqlstate)
