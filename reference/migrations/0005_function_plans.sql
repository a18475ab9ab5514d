-- The three functions every scoped transaction calls, rewritten in PL/pgSQL with the same signatures,
-- results, security and grants. A SQL function whose body cannot be inlined plans that body again on
-- every call (it was half of their cost); PL/pgSQL keeps the plan for the session. Forward-only.

create or replace function appsurface_durable.scope_for_routing_id(p_routing_id bigint) returns text
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
    return (select s.scope_id from appsurface_durable.scopes s where s.routing_id = p_routing_id);
end
$$;

create or replace function appsurface_durable.locked_scope_fences()
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

create or replace function appsurface_durable.current_scope_routing_id() returns bigint
language plpgsql stable as $$
begin
    return (select s.routing_id from appsurface_durable.scopes s where s.scope_id = appsurface_durable.current_scope());
end
$$;
