-- The Work store. Work is accepted through the transaction writer (an insert in the caller's
-- transaction, compare-or-return on the idempotency key) and samples clock_timestamp() itself.

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
