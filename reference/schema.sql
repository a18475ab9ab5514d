-- The declared complete schema of the Durable Schedule protocol v1 store: what migrations 0001-0004
-- (after the runner's bootstrap) produce together, consolidated into one file in dependency order.
--
-- This file is a declaration to read and to compare against, not a way to install a store: a database
-- built from it has no schema_migrations rows, so the migration runner would not accept it. Install
-- with `python -m reference migrate`. tests/test_reference_migrations.py applies every migration to one
-- empty database and this file to another and requires identical `pg_dump --schema-only` output and
-- identical seed rows, so a migration that changes the schema must change this file in the same commit.
--
-- Assumes the roles of reference/roles/recipe.sql exist and runs as appsurface_durable_owner.
-- Function bodies are byte-for-byte those of the migrations (pg_dump prints them verbatim).

-- ================================================================================================
-- Schema and the migration runner's bookkeeping (reference/queries/bootstrap.sql)
-- ================================================================================================

create schema if not exists appsurface_durable;
grant usage on schema appsurface_durable to appsurface_durable_runtime, appsurface_durable_dispatcher;

create table if not exists appsurface_durable.schema_migrations (
    version    integer     primary key,
    name       text        not null unique,
    checksum   text        not null,
    applied_at timestamptz not null default transaction_timestamp()
);
grant select on appsurface_durable.schema_migrations to appsurface_durable_runtime;

-- Functions the owner creates are not executable by PUBLIC; each function below is granted EXECUTE
-- exactly. (A per-schema form cannot revoke a global default, so this is the owner's global default.)
alter default privileges revoke execute on functions from public;

-- ================================================================================================
-- Store runtime: the epoch and the runtime-version registry
-- ================================================================================================

create table appsurface_durable.store_runtime (
    singleton     boolean primary key default true check (singleton),
    runtime_epoch bigint  not null default 1 check (runtime_epoch > 0)
);
grant select on appsurface_durable.store_runtime to appsurface_durable_runtime;

-- Which runtime version needs which migration. Version 3 admits Work and Flow; version 4 adds Schedule.
create table appsurface_durable.runtime_versions (
    version            integer primary key,
    requires_migration integer not null,
    admits             text    not null
);
grant select on appsurface_durable.runtime_versions to appsurface_durable_runtime;

-- Operators advance the epoch; every schedule bound to an older epoch suspends before it acts.
-- Owner only.
create function appsurface_durable.advance_runtime_epoch() returns bigint
language sql as $$
    update appsurface_durable.store_runtime set runtime_epoch = runtime_epoch + 1 returning runtime_epoch
$$;

-- ================================================================================================
-- Scopes: the tenant boundary, with forced RLS on the local setting appsurface_durable.scope_id
-- ================================================================================================

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
grant execute on function appsurface_durable.current_scope() to appsurface_durable_runtime;
grant execute on function appsurface_durable.set_local_scope(text) to appsurface_durable_runtime;

-- routing_id is the opaque number the dispatcher sees instead of the scope identity.
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
grant select on appsurface_durable.scopes to appsurface_durable_runtime;

-- Owner only.
create function appsurface_durable.create_scope(p_scope_id text) returns bigint
language sql as $$
    insert into appsurface_durable.scopes (scope_id) values (p_scope_id) returning routing_id
$$;

-- A scope-generation change fences every schedule bound to the old one. Owner only.
create function appsurface_durable.advance_scope_generation(p_scope_id text) returns bigint
language sql as $$
    update appsurface_durable.scopes set generation = generation + 1
    where scope_id = p_scope_id returning generation
$$;

-- The runtime learns which scope a claimed routing ID belongs to before it sets the local scope.
-- (PL/pgSQL: its plan is kept for the session, where a SQL body that cannot be inlined is planned per call.)
create function appsurface_durable.scope_for_routing_id(p_routing_id bigint) returns text
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
    return (select s.scope_id from appsurface_durable.scopes s where s.routing_id = p_routing_id);
end
$$;
grant execute on function appsurface_durable.scope_for_routing_id(bigint) to appsurface_durable_runtime;

-- The store epoch and the scope generation, the scope row share-locked until the transaction ends.
-- Security definer because a row lock needs UPDATE, which the runtime must not have on scopes.
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
grant execute on function appsurface_durable.locked_scope_fences() to appsurface_durable_runtime;

-- ================================================================================================
-- Work: accepted by the transaction writer in the caller's transaction; samples clock_timestamp()
-- ================================================================================================

create table appsurface_durable.work_items (
    scope_id        text        not null references appsurface_durable.scopes (scope_id),
    work_id         uuid        not null,
    idempotency_key text        not null check (length(idempotency_key) between 1 and 512),
    command         text        not null check (length(command) between 1 and 256),
    activity        text        not null check (length(activity) between 1 and 256),
    payload         jsonb       not null default '{}',
    state           text        not null default 'pending'
                    check (state in ('pending', 'running', 'retrying', 'suspended', 'succeeded', 'failed', 'canceled')),
    attempt         integer     not null default 0 check (attempt >= 0),
    accepted_at_utc timestamptz not null default clock_timestamp(),
    terminal_at_utc timestamptz,
    primary key (scope_id, work_id),
    unique (scope_id, idempotency_key),
    check ((state in ('succeeded', 'failed', 'canceled')) = (terminal_at_utc is not null))
);
alter table appsurface_durable.work_items enable row level security;
alter table appsurface_durable.work_items force row level security;
create policy scope_isolation on appsurface_durable.work_items to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());
grant select, insert, update on appsurface_durable.work_items to appsurface_durable_runtime;

-- ================================================================================================
-- Schedule commands, definitions and immutable generations
-- ================================================================================================

-- Every create, update, delete and release, with the one transaction_timestamp() it captured.
create table appsurface_durable.schedule_commands (
    scope_id        text        not null references appsurface_durable.scopes (scope_id),
    command_id      uuid        not null,
    schedule_id     uuid        not null,
    command_kind    text        not null check (command_kind in ('create', 'update', 'delete', 'release-after-recovery')),
    accepted_at_utc timestamptz not null,
    generation      bigint,
    revision        bigint      not null,
    primary key (scope_id, command_id)
);
alter table appsurface_durable.schedule_commands enable row level security;
alter table appsurface_durable.schedule_commands force row level security;
create policy scope_isolation on appsurface_durable.schedule_commands to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());
grant select, insert on appsurface_durable.schedule_commands to appsurface_durable_runtime;

-- The active definition row: lifecycle, revision, active generation, fences and the cursor.
create table appsurface_durable.schedule_definitions (
    scope_id           text        not null references appsurface_durable.scopes (scope_id),
    schedule_id        uuid        not null,
    lifecycle_state    text        not null check (lifecycle_state in ('active', 'suspended', 'deleted')),
    suspension_reason  text        check (suspension_reason in ('runtime-epoch', 'scope-generation', 'clock-anomaly',
                                                   'idempotency-conflict')),
    revision           bigint      not null check (revision > 0),
    active_generation  bigint      not null check (active_generation > 0),
    runtime_epoch      bigint      not null,
    scope_generation   bigint      not null,
    cursor_utc         timestamptz not null,
    created_at_utc     timestamptz not null,
    updated_at_utc     timestamptz not null,
    primary key (scope_id, schedule_id),
    check ((lifecycle_state = 'suspended') = (suspension_reason is not null))
);
alter table appsurface_durable.schedule_definitions enable row level security;
alter table appsurface_durable.schedule_definitions force row level security;
create policy scope_isolation on appsurface_durable.schedule_definitions to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());
grant select, insert, update on appsurface_durable.schedule_definitions to appsurface_durable_runtime;

-- The cursor is a high-water mark: no update, by any role, moves it backwards.
create function appsurface_durable.cursor_never_moves_backwards() returns trigger
language plpgsql as $$
begin
    if new.cursor_utc < old.cursor_utc then
        raise exception 'the cursor never moves backwards (% -> %)', old.cursor_utc, new.cursor_utc
            using errcode = 'check_violation';
    end if;
    return new;
end
$$;
create trigger cursor_never_moves_backwards before update on appsurface_durable.schedule_definitions
    for each row execute function appsurface_durable.cursor_never_moves_backwards();

-- A snapshot of the definition and its target, never rewritten (no UPDATE/DELETE grant, and a trigger
-- refuses both even to the owner).
create table appsurface_durable.schedule_generations (
    scope_id          text        not null,
    schedule_id       uuid        not null,
    generation        bigint      not null check (generation > 0),
    schedule_kind     text        not null check (schedule_kind in ('at', 'after', 'every')),
    at_utc            timestamptz,
    after_us          bigint      check (after_us > 0),
    every_us          bigint      check (every_us > 0),
    anchor_utc        timestamptz,
    anchor_explicit   boolean     not null default false,
    misfire_policy    text        not null check (misfire_policy in ('run-once', 'skip')),
    overlap_policy    text        not null check (overlap_policy = 'queue-one'),
    run_policy        text        not null check (run_policy = 'run-once'),
    safety_window_us  bigint      not null check (safety_window_us > 0),
    target_kind       text        not null check (target_kind = 'work'),
    target_command    text        not null check (length(target_command) between 1 and 256),
    target_payload    jsonb       not null default '{}',
    accepted_at_utc   timestamptz not null,
    command_id        uuid        not null,
    primary key (scope_id, schedule_id, generation),
    foreign key (scope_id, schedule_id) references appsurface_durable.schedule_definitions (scope_id, schedule_id),
    check (case schedule_kind
             when 'at'    then at_utc is not null and after_us is null and every_us is null and anchor_utc is null
             when 'after' then after_us is not null and at_utc is null and every_us is null and anchor_utc is null
             when 'every' then every_us is not null and anchor_utc is not null and at_utc is null and after_us is null
           end)
);
alter table appsurface_durable.schedule_generations enable row level security;
alter table appsurface_durable.schedule_generations force row level security;
create policy scope_isolation on appsurface_durable.schedule_generations to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());
grant select, insert on appsurface_durable.schedule_generations to appsurface_durable_runtime;

create function appsurface_durable.generations_are_immutable() returns trigger
language plpgsql as $$
begin
    raise exception 'schedule generations are append-only: % refused on generation %', tg_op, old.generation
        using errcode = 'restrict_violation';
end
$$;
create trigger generations_are_immutable before update or delete on appsurface_durable.schedule_generations
    for each row execute function appsurface_durable.generations_are_immutable();

-- ================================================================================================
-- Occurrences, keyed by the stable identity (scope_id, schedule_id, generation, kind, first_nominal_utc)
-- ================================================================================================

-- The schema reserves every materialization state; Gate A writes only pending, materialized, superseded.
create table appsurface_durable.schedule_occurrences (
    scope_id              text        not null,
    schedule_id           uuid        not null,
    generation            bigint      not null,
    occurrence_kind       text        not null check (occurrence_kind in ('nominal', 'recovery', 'coalesced')),
    first_nominal_utc     timestamptz not null,
    last_nominal_utc      timestamptz not null,
    state                 text        not null
                          check (state in ('pending', 'claimed', 'materialized', 'skipped', 'superseded', 'canceled', 'suspended')),
    work_id               uuid,
    work_idempotency_key  text,
    work_command          text,
    work_activity         text,
    decided_at_utc        timestamptz not null,
    materialized_at_utc   timestamptz,
    primary key (scope_id, schedule_id, generation, occurrence_kind, first_nominal_utc),
    foreign key (scope_id, schedule_id, generation)
        references appsurface_durable.schedule_generations (scope_id, schedule_id, generation),
    check (last_nominal_utc >= first_nominal_utc),
    check (occurrence_kind <> 'nominal' or last_nominal_utc = first_nominal_utc),
    check ((state = 'materialized') = (work_id is not null)),
    check ((work_id is null) = (work_idempotency_key is null) and (work_id is null) = (work_command is null)
           and (work_id is null) = (work_activity is null))
);
-- At most one pending coalesced occurrence per schedule and generation.
create unique index schedule_occurrences_one_pending_coalesced
    on appsurface_durable.schedule_occurrences (scope_id, schedule_id, generation)
    where occurrence_kind = 'coalesced' and state = 'pending';
create unique index schedule_occurrences_work
    on appsurface_durable.schedule_occurrences (scope_id, work_id) where work_id is not null;
create index schedule_occurrences_open
    on appsurface_durable.schedule_occurrences (scope_id, schedule_id) where state in ('pending', 'materialized');
alter table appsurface_durable.schedule_occurrences enable row level security;
alter table appsurface_durable.schedule_occurrences force row level security;
create policy scope_isolation on appsurface_durable.schedule_occurrences to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());
grant select, insert, update on appsurface_durable.schedule_occurrences to appsurface_durable_runtime;

-- A pending coalesced occurrence may only move its last nominal instant forward.
create function appsurface_durable.coalesced_range_only_grows() returns trigger
language plpgsql as $$
begin
    if old.occurrence_kind = 'coalesced' and old.state = 'pending' and new.last_nominal_utc < old.last_nominal_utc then
        raise exception 'coalesced occurrence range may only grow forward (% -> %)', old.last_nominal_utc, new.last_nominal_utc
            using errcode = 'check_violation';
    end if;
    return new;
end
$$;
create trigger coalesced_range_only_grows before update on appsurface_durable.schedule_occurrences
    for each row execute function appsurface_durable.coalesced_range_only_grows();

-- ================================================================================================
-- The dispatch queue (payload-free) and its private timing
-- ================================================================================================

-- Exactly six columns: no target, payload, policy, due time, cursor or label lives here.
create table appsurface_durable.schedule_dispatch (
    dispatch_id       bigint generated always as identity primary key,
    schedule_id       uuid   not null unique,
    scope_routing_id  bigint not null references appsurface_durable.scopes (routing_id),
    lease_state       text   not null default 'ready' check (lease_state in ('ready', 'leased')),
    lease_generation  bigint not null default 0 check (lease_generation >= 0),
    dispatch_revision bigint not null default 1 check (dispatch_revision > 0)
);

-- The queue carries the routing ID, not the scope: its runtime policy maps the local scope to it.
create function appsurface_durable.current_scope_routing_id() returns bigint
language plpgsql stable as $$
begin
    return (select s.routing_id from appsurface_durable.scopes s where s.scope_id = appsurface_durable.current_scope());
end
$$;
grant execute on function appsurface_durable.current_scope_routing_id() to appsurface_durable_runtime;

alter table appsurface_durable.schedule_dispatch enable row level security;
alter table appsurface_durable.schedule_dispatch force row level security;
create policy scope_isolation on appsurface_durable.schedule_dispatch to appsurface_durable_runtime
    using (scope_routing_id = appsurface_durable.current_scope_routing_id())
    with check (scope_routing_id = appsurface_durable.current_scope_routing_id());
create policy dispatcher_reads_queue on appsurface_durable.schedule_dispatch
    for select to appsurface_durable_dispatcher using (true);
-- Grant order matters to the ACL (and so to pg_dump): runtime first, then the dispatcher's six columns.
grant select, insert on appsurface_durable.schedule_dispatch to appsurface_durable_runtime;
grant update (lease_state, dispatch_revision) on appsurface_durable.schedule_dispatch to appsurface_durable_runtime;
grant select (dispatch_id, schedule_id, scope_routing_id, lease_state, lease_generation, dispatch_revision)
    on appsurface_durable.schedule_dispatch to appsurface_durable_dispatcher;

-- Due time and lease, read by the claim function and the runtime only. claimable_at_utc is the due time
-- while ready and the lease expiry while leased, so one index serves claims.
create table appsurface_durable.schedule_dispatch_timing (
    dispatch_id          bigint      primary key references appsurface_durable.schedule_dispatch (dispatch_id) on delete cascade,
    scope_id             text        not null references appsurface_durable.scopes (scope_id),
    due_at_utc           timestamptz,
    claimable_at_utc     timestamptz,
    lease_owner          text,
    lease_expires_at_utc timestamptz,
    check ((lease_owner is null) = (lease_expires_at_utc is null))
);
create index schedule_dispatch_timing_claimable
    on appsurface_durable.schedule_dispatch_timing (claimable_at_utc) where claimable_at_utc is not null;
alter table appsurface_durable.schedule_dispatch_timing enable row level security;
alter table appsurface_durable.schedule_dispatch_timing force row level security;
create policy scope_isolation on appsurface_durable.schedule_dispatch_timing to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());
grant select, insert, update on appsurface_durable.schedule_dispatch_timing to appsurface_durable_runtime;

-- What "blank or control-character lease owners" means for Unicode (docs/protocol-notes.md, 24m). An
-- owner is blank when nothing is left after removing every White_Space and Default_Ignorable_Code_Point
-- code point; it carries a control character when any code point is of general category Cc, Cf, Zl or Zp.
-- The sets are written out (Unicode 15) because PostgreSQL's regular expressions have no property classes.
create function appsurface_durable.blank_code_points() returns text
language sql immutable as $$
    select '[\u0009-\u000D\u0020\u0085\u00A0\u00AD\u034F\u061C\u115F\u1160\u1680\u17B4\u17B5\u180B-\u180F'
        || '\u2000-\u200F\u2028-\u202F\u205F-\u206F\u3000\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFF8'
        || '\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0000-\U000E0FFF]'
$$;

create function appsurface_durable.control_code_points() returns text
language sql immutable as $$
    select '[\u0001-\u001F\u007F-\u009F\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890\u0891\u08E2\u180E'
        || '\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB\U000110BD\U000110CD'
        || '\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001\U000E0020-\U000E007F]'
$$;

-- The lease a claim would grant, checked where it lands: an interval's months and days are calendar
-- arithmetic while interval comparison counts a month as 30 days, so '1 mon -30 days 5 min' compares as
-- five minutes yet ends a day later in a 31-day month. The computed expiry must be strictly after the
-- claim and at most ten minutes after it; a duration that overflows the timestamp range is refused too.
-- UTC, so the session's time zone cannot move a day's length.
create function appsurface_durable.lease_expiry(p_claimed_at timestamptz, p_lease_duration interval)
returns timestamptz
language plpgsql stable set search_path = pg_catalog, pg_temp set timezone = 'UTC' as $$
declare
    expires_utc timestamptz;
begin
    begin
        expires_utc := p_claimed_at + p_lease_duration;
    exception when datetime_field_overflow or numeric_value_out_of_range or interval_field_overflow then
        expires_utc := null;
    end;
    if expires_utc is null or expires_utc <= p_claimed_at or expires_utc > p_claimed_at + interval '10 minutes' then
        raise exception 'lease duration must end after the claim and at most 10 minutes after it (got %, ending %)',
            coalesce(p_lease_duration::text, 'null'), coalesce(expires_utc::text, 'out of range')
            using errcode = 'invalid_parameter_value';
    end if;
    return expires_utc;
end
$$;

-- The dispatcher's only door: validates its arguments before it touches a row, uses the due time
-- internally, and returns nothing but the routing ID, the Schedule ID and the dispatch revision.
create function appsurface_durable.claim_schedule_dispatch(p_lease_owner text, p_lease_duration interval)
returns table (scope_routing_id bigint, schedule_id uuid, dispatch_revision bigint)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    claimed_id bigint;
    now_utc timestamptz := transaction_timestamp();
    expires_utc timestamptz;
begin
    if p_lease_owner is null or regexp_replace(p_lease_owner, appsurface_durable.blank_code_points(), '', 'g') = '' then
        raise exception 'lease owner must not be blank (white space and default-ignorable code points only)'
            using errcode = 'invalid_parameter_value';
    end if;
    if p_lease_owner ~ appsurface_durable.control_code_points() or length(p_lease_owner) > 200 then
        raise exception 'lease owner must be at most 200 characters without control, format or line/paragraph separator code points'
            using errcode = 'invalid_parameter_value';
    end if;
    expires_utc := appsurface_durable.lease_expiry(now_utc, p_lease_duration);

    select t.dispatch_id into claimed_id
    from appsurface_durable.schedule_dispatch_timing t
    join appsurface_durable.schedule_dispatch d on d.dispatch_id = t.dispatch_id
    where t.claimable_at_utc <= now_utc
    order by t.claimable_at_utc
    limit 1
    for update of t, d skip locked;
    if claimed_id is null then
        return;
    end if;

    update appsurface_durable.schedule_dispatch_timing
       set lease_owner = p_lease_owner,
           lease_expires_at_utc = expires_utc,
           claimable_at_utc = expires_utc
     where dispatch_id = claimed_id;
    return query
        update appsurface_durable.schedule_dispatch d
           set lease_state = 'leased', lease_generation = d.lease_generation + 1,
               dispatch_revision = d.dispatch_revision + 1
         where d.dispatch_id = claimed_id
        returning d.scope_routing_id, d.schedule_id, d.dispatch_revision;
end
$$;
grant execute on function appsurface_durable.claim_schedule_dispatch(text, interval) to appsurface_durable_dispatcher;

-- ================================================================================================
-- History, partitioned by month (children created by ensure_schedule_history_partitions)
-- ================================================================================================

create table appsurface_durable.schedule_history (
    scope_id        text        not null,
    schedule_id     uuid        not null,
    recorded_at_utc timestamptz not null,
    event           text        not null,
    generation      bigint,
    detail          jsonb       not null default '{}',
    check (event in ('created', 'updated', 'deleted', 'released-after-recovery', 'suspended',
                     'recovery-declared', 'recovery-skipped', 'requeued-after-work-terminal', 'due-instants-superseded'))
) partition by range (recorded_at_utc);
alter table appsurface_durable.schedule_history enable row level security;
alter table appsurface_durable.schedule_history force row level security;
create policy scope_isolation on appsurface_durable.schedule_history to appsurface_durable_runtime
    using (scope_id = appsurface_durable.current_scope())
    with check (scope_id = appsurface_durable.current_scope());
grant select, insert on appsurface_durable.schedule_history to appsurface_durable_runtime;

-- The audit trail, guarded by the database for every role (the owner included; a month leaves whole,
-- by detach after its transcript): a history row is stamped with its transaction's own timestamp,
-- names an event the protocol writes, and is about a schedule of its scope; no row is ever updated
-- or deleted. The runtime may append a well-formed event about its own schedule, which is what the
-- protocol's transactions do; it cannot back-date one, invent a schedule or rewrite the past.
create function appsurface_durable.history_is_an_audit_trail() returns trigger
language plpgsql as $$
begin
    if tg_op <> 'INSERT' then
        raise exception 'schedule history is append-only: % refused', tg_op using errcode = 'restrict_violation';
    end if;
    if new.recorded_at_utc is distinct from transaction_timestamp() then
        raise exception 'schedule history is stamped by the server: recorded_at_utc must be transaction_timestamp(), not %',
            new.recorded_at_utc using errcode = 'check_violation';
    end if;
    if not exists (select 1 from appsurface_durable.schedule_definitions d
                   where d.scope_id = new.scope_id and d.schedule_id = new.schedule_id) then
        raise exception 'schedule history must be about a schedule of its scope: scope % has no schedule %',
            new.scope_id, new.schedule_id using errcode = 'foreign_key_violation';
    end if;
    return new;
end
$$;
create trigger history_is_an_audit_trail before insert or update or delete on appsurface_durable.schedule_history
    for each row execute function appsurface_durable.history_is_an_audit_trail();

-- Creates the current and the next month's partitions with the parent's exact policy shape and grants.
-- Owner only; run it before the pre-created next month begins.
create function appsurface_durable.ensure_schedule_history_partitions() returns setof text
language plpgsql as $$
declare
    month_start date;
    child text;
begin
    foreach month_start in array array[date_trunc('month', transaction_timestamp() at time zone 'UTC')::date,
                                        (date_trunc('month', transaction_timestamp() at time zone 'UTC') + interval '1 month')::date] loop
        child := 'schedule_history_' || to_char(month_start, 'YYYYMM');
        if to_regclass('appsurface_durable.' || child) is null then
            execute format('create table appsurface_durable.%I partition of appsurface_durable.schedule_history
                                for values from (%L) to (%L)',
                           child, month_start::timestamp at time zone 'UTC',
                           (month_start + interval '1 month')::timestamp at time zone 'UTC');
            execute format('alter table appsurface_durable.%I enable row level security', child);
            execute format('alter table appsurface_durable.%I force row level security', child);
            execute format('create policy scope_isolation on appsurface_durable.%I to appsurface_durable_runtime
                                using (scope_id = appsurface_durable.current_scope())
                                with check (scope_id = appsurface_durable.current_scope())', child);
            execute format('grant select, insert on appsurface_durable.%I to appsurface_durable_runtime', child);
        end if;
        return next child;
    end loop;
end
$$;

-- ================================================================================================
-- The Work-terminal requeue: only dispatch eligibility changes here
-- ================================================================================================

-- When Work reaches terminal truth, the same transaction requeues the Schedule's dispatch row if a
-- pending coalesced occurrence waits in the active generation. Retries, suspension and other
-- nonterminal states release nothing. It locks the dispatch row before it looks: a
-- decision writing a coalesced occurrence holds that row until it commits.
create function appsurface_durable.requeue_after_work_terminal() returns trigger
language plpgsql as $$
declare
    occ record;
    dispatch bigint;
    now_utc timestamptz := transaction_timestamp();
begin
    select o.schedule_id into occ
    from appsurface_durable.schedule_occurrences o
    where o.scope_id = new.scope_id and o.work_id = new.work_id;
    if not found then
        return new;
    end if;
    select d.dispatch_id into dispatch
    from appsurface_durable.schedule_dispatch d
    where d.schedule_id = occ.schedule_id
    for update of d;
    if dispatch is null or not exists (
        select 1
        from appsurface_durable.schedule_definitions s
        join appsurface_durable.schedule_occurrences p
          on p.scope_id = s.scope_id and p.schedule_id = s.schedule_id and p.generation = s.active_generation
        where s.scope_id = new.scope_id and s.schedule_id = occ.schedule_id and s.lifecycle_state = 'active'
          and p.occurrence_kind = 'coalesced' and p.state = 'pending') then
        return new;
    end if;
    update appsurface_durable.schedule_dispatch_timing
       set due_at_utc = now_utc,
           claimable_at_utc = case when lease_owner is null then now_utc else claimable_at_utc end
     where dispatch_id = dispatch;
    insert into appsurface_durable.schedule_history (scope_id, schedule_id, recorded_at_utc, event, detail)
    values (new.scope_id, occ.schedule_id, now_utc, 'requeued-after-work-terminal',
            jsonb_build_object('work_id', new.work_id, 'work_state', new.state));
    return new;
end
$$;
create trigger requeue_after_work_terminal
    after update of state on appsurface_durable.work_items
    for each row
    when (new.state in ('succeeded', 'failed', 'canceled') and old.state not in ('succeeded', 'failed', 'canceled'))
    execute function appsurface_durable.requeue_after_work_terminal();

-- ================================================================================================
-- Seed rows and the first history partitions
-- ================================================================================================

insert into appsurface_durable.store_runtime default values;
insert into appsurface_durable.runtime_versions values (3, 3, 'Work and Flow'), (4, 4, 'Work, Flow and Schedule');
select appsurface_durable.ensure_schedule_history_partitions();
