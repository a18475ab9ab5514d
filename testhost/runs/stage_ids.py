"""The ids of the two stages a run may hold beside its cases, each run as the pseudo-scenario it is named after."""

SCHEMA_STAGE_ID = "schema-stage"  # the implementation's own migrations, checked before any case (schema_stage.py)
SCHEMA_VERSION_ID = "schema-version"  # the hello against a store of an older schema (schema_version.py)
