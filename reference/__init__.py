"""Reference implementation of the Durable Schedule protocol v1, Gate A, on PostgreSQL."""

from .client import ScheduleClient
from .errors import (AccessDenied, BridgeRoleError, CommitOutcomeUnknown, DatabaseError, DurableError,
                     HistoryPartitionMissing, IdempotencyConflict, LeaseLost, MigrationRefused, RetriableError,
                     SchemaNotReady)
from .model import ScheduleSpec, ScheduleView, Target
from .problems import Problem
from .processor import CancellationToken, ProcessCounts, ProcessRequest, ScheduleProcessor
from .work import WorkRequest, WorkStore, WorkTransactionWriter

__all__ = [
    "AccessDenied", "BridgeRoleError", "CancellationToken", "CommitOutcomeUnknown", "DatabaseError", "DurableError",
    "HistoryPartitionMissing", "IdempotencyConflict", "LeaseLost", "MigrationRefused", "Problem", "ProcessCounts",
    "ProcessRequest", "RetriableError", "ScheduleClient", "ScheduleProcessor", "ScheduleSpec", "ScheduleView",
    "SchemaNotReady", "Target", "WorkRequest", "WorkStore", "WorkTransactionWriter",
]
