-- The role recipe, run once per cluster (and per database for the CREATE grant) as a superuser.
-- migration owner: owns and migrates the schema; BYPASSRLS so it can audit every scope and own the
--                  security-definer claim function, which reads due times across scopes.
-- runtime:         the scoped processor and client; subject to forced RLS.
-- dispatcher:      trusted, payload-free: reads six queue columns and claims. Nothing else.
do $$
begin
    if not exists (select from pg_roles where rolname = 'appsurface_durable_owner') then
        create role appsurface_durable_owner login bypassrls;
    end if;
    if not exists (select from pg_roles where rolname = 'appsurface_durable_runtime') then
        create role appsurface_durable_runtime login nobypassrls noinherit;
    end if;
    if not exists (select from pg_roles where rolname = 'appsurface_durable_dispatcher') then
        create role appsurface_durable_dispatcher login nobypassrls noinherit;
    end if;
    execute format('grant create on database %I to appsurface_durable_owner', current_database());
    execute format('grant connect on database %I to appsurface_durable_runtime, appsurface_durable_dispatcher',
                   current_database());
end
$$;
