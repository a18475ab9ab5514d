-- name: bootstrap
-- The runner's own bookkeeping, created before migration 0001 by the migration owner.
create schema if not exists appsurface_durable;
create table if not exists appsurface_durable.schema_migrations (
    version    integer     primary key,
    name       text        not null unique,
    checksum   text        not null,
    applied_at timestamptz not null default transaction_timestamp()
);
grant usage on schema appsurface_durable to appsurface_durable_runtime;
grant select on appsurface_durable.schema_migrations to appsurface_durable_runtime;

-- name: applied
select version, name, checksum from appsurface_durable.schema_migrations order by version;

-- name: record
insert into appsurface_durable.schema_migrations (version, name, checksum) values (%(version)s, %(name)s, %(checksum)s);

-- name: lock
select pg_advisory_xact_lock(hashtext('appsurface_durable.migrations'));
