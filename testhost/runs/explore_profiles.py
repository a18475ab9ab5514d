"""Explore's profiles: how long and how wide a search runs (a module of its own, without Hypothesis, so the CLI
lists them without importing it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """How long and how wide a search runs; every profile is registered in PROFILES."""

    name: str
    summary: str
    max_examples: int | None  # programs per search (None: as many as the duration allows)
    duration_s: float | None  # stop once this much time has passed (None: when max_examples are done)
    max_steps: int = 8
    fault_percent: int = 80  # of the programs whose matrix has a case: how many run faulted cases too
    faults_per_program: int = 4  # at most this many faulted cases per program (drawn from 1)
    shrink_s: float = 150.0  # time for shrinking a failure; then the smallest failing program found so far stands
    progress_s: float = 10.0  # a progress line this often
    random_seed: bool = False  # draw the seed (else --seed, default 0: the same programs every run)
    hostile_examples: int = 150  # hostile calls per run (split over the jobs), sent before the programs
    hostile_shrink_s: float = 30.0  # time for shrinking a hostile call that was not refused as it must be
    hostile_sweep: bool = True  # first every tabled hostile call once (scenarios/hostile.py, sweep), split over jobs


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("ci", "derandomized (seed 0 unless --seed), a fixed budget of 400 programs, fits a CI job", 400, None,
            shrink_s=45.0, fault_percent=100, faults_per_program=6),
    Profile("dev", "a fresh seed every run, 200 programs, longer timelines", 200, None, max_steps=10,
            random_seed=True, hostile_examples=400),
    Profile("soak", "a fresh seed every run, unattended for an hour, a progress line a minute, stops by itself",
            None, 3600.0, max_steps=12, progress_s=60.0, shrink_s=300.0, random_seed=True, hostile_examples=3000,
            hostile_shrink_s=120.0),
)}
