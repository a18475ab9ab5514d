"""Whole runs: certify and its workers, the schema stages, explore, hostile inputs, mutants, coverage."""
