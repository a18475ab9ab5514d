-- Scopes: the tenant boundary. Every scoped table is keyed on scope_id and filtered by forced RLS
-- on the local setting appsurface_durable.scope_id. The routing ID is the opaque number the
-- dispatcher sees instead of the scope identity.

-- The scope authorizes only the transaction that set it: set_local_scope stores it bound to that
-- transaction's ID, and current_scope reads it only inside that transaction. A value left at session
-- level on a pooled connection (SET, or set_config(..., false)) reads nothing in any later transaction,
-- and neither does a raw scope ID written to the setting by hand.
create function appsurface_durable.current_scope() returns text
language sql stable as $$
    select case when split_part(current_setting('appsurface_durable.scope_id', true), '/', 1)
                     = pg_current_xact_id_if_assigned()::text
                then nullif(split_part(current_setting('appsurface_durable.scope_id', true), '/', 2), '') end
$$;

create function appsurface_durable.set_local_scope(p_scope_id text) returns text
language sql as $$
    select split_part(set_config('appsurface_durable.scope_id',
                                 pg_current_xact_id()::text || '/' || coalesce(p_scope_id, ''), true), '/', 2)
$$;

create table appsurface_durable.scopes (
    scope_id   text   primary key check (scope_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    routing_id bigint generated always as identity unique,
    generation bigint not null default 1 check (generation > 0)
);
alter table appsurface_durable.scopes enable row level security;
alter table appsurface_durable.scopes force row level security;
create policy scope_isolation on appsurface_durable.scopes to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());

create function appsurface_durable.create_scope(p_scope_id text) returns bigint
language sql as $$
    insert into appsurface_durable.scopes (scope_id) values (p_scope_id) returning routing_id
$$;

-- A scope-generation change (the scope was rebuilt or moved) fences every schedule bound to the old one.
create function appsurface_durable.advance_scope_generation(p_scope_id text) returns bigint
language sql as $$
    update appsurface_durable.scopes set generation = generation + 1
    where scope_id = p_scope_id returning generation
$$;

-- The runtime learns which scope a claimed routing ID belongs to before it sets the local scope.
-- This and locked_scope_fences are PL/pgSQL: a SQL function whose body cannot be inlined is planned again
-- on every call, while PL/pgSQL keeps its plan for the session.
create function appsurface_durable.scope_for_routing_id(p_routing_id bigint) returns text
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
    return (select s.scope_id from appsurface_durable.scopes s where s.routing_id = p_routing_id);
end
$$;

-- The fences a scoped transaction validates: the active store epoch and the scope generation, with the
-- scope row share-locked until the transaction ends so a generation change waits for it. Security
-- definer because a row lock needs UPDATE, which the runtime must not have on scopes.
create function appsurface_durable.locked_scope_fences()
returns table (runtime_epoch bigint, scope_generation bigint, routing_id bigint)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
    return query
        select (select r.runtime_epoch from appsurface_durable.store_runtime r), s.generation, s.routing_id
        from appsurface_durable.scopes s
        where s.scope_id = appsurface_durable.current_scope()
        for share of s;
end
$$;

grant select on appsurface_durable.scopes to appsurface_durable_runtime;
grant execute on function appsurface_durable.current_scope() to appsurface_durable_runtime;
grant execute on function appsurface_durable.set_local_scope(text) to appsurface_durable_runtime;
grant execute on function appsurface_durable.scope_for_routing_id(bigint) to appsurface_durable_runtime;
grant execute on function appsurface_durable.locked_scope_fences() to appsurface_durable_runtime;
