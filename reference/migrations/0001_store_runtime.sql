-- Functions the owner creates are not executable by PUBLIC; each migration grants EXECUTE exactly.
-- (A per-schema form cannot revoke a global default, so this is the owner's global default.)
alter default privileges revoke execute on functions from public;

-- The store runtime: its epoch (bumped by an operator after a restore or failover) and the
-- runtime-version registry (which runtime version needs which migration).

create table appsurface_durable.store_runtime (
    singleton     boolean primary key default true check (singleton),
    runtime_epoch bigint  not null default 1 check (runtime_epoch > 0)
);
insert into appsurface_durable.store_runtime default values;

create table appsurface_durable.runtime_versions (
    version            integer primary key,
    requires_migration integer not null,
    admits             text    not null
);
insert into appsurface_durable.runtime_versions values (3, 3, 'Work and Flow');

-- Operators advance the epoch; every schedule bound to an older epoch suspends before it acts.
create function appsurface_durable.advance_runtime_epoch() returns bigint
language sql as $$
    update appsurface_durable.store_runtime set runtime_epoch = runtime_epoch + 1 returning runtime_epoch
$$;

grant usage on schema appsurface_durable to appsurface_durable_runtime, appsurface_durable_dispatcher;
grant select on appsurface_durable.store_runtime, appsurface_durable.runtime_versions to appsurface_durable_runtime;
