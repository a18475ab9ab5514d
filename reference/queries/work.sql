-- name: enqueue
-- The transaction writer: insert in the caller's transaction, or find the Work already accepted under
-- this idempotency key. Work samples its own clock_timestamp() for accepted_at_utc. No row: the key's Work
-- was committed by another transaction after this statement's snapshot (read it with by_idempotency_key).
with inserted as (
    insert into appsurface_durable.work_items (scope_id, work_id, idempotency_key, command, activity, payload)
    values (appsurface_durable.current_scope(), %(work_id)s, %(idempotency_key)s, %(command)s, %(activity)s,
            %(payload)s)
    on conflict (scope_id, idempotency_key) do nothing
    returning work_id, idempotency_key, command, activity, payload, accepted_at_utc, true as created, state)
select * from inserted
union all
select work_id, idempotency_key, command, activity, payload, accepted_at_utc, false as created, state
from appsurface_durable.work_items
where scope_id = appsurface_durable.current_scope() and idempotency_key = %(idempotency_key)s
  and not exists (select from inserted);

-- name: by_idempotency_key
select work_id, idempotency_key, command, activity, payload, accepted_at_utc, false as created, state
from appsurface_durable.work_items
where scope_id = appsurface_durable.current_scope() and idempotency_key = %(idempotency_key)s;

-- name: lock_work
select * from appsurface_durable.work_items
where scope_id = appsurface_durable.current_scope() and work_id = %(work_id)s
for update;

-- name: get_work
select * from appsurface_durable.work_items
where scope_id = appsurface_durable.current_scope() and work_id = %(work_id)s;

-- name: list_work
select * from appsurface_durable.work_items
where scope_id = appsurface_durable.current_scope()
order by accepted_at_utc, work_id;

-- name: transition
update appsurface_durable.work_items
   set state = %(state)s,
       attempt = attempt + case when %(state)s in ('running', 'retrying') then 1 else 0 end,
       terminal_at_utc = case when %(state)s in ('succeeded', 'failed', 'canceled') then clock_timestamp() end
 where scope_id = appsurface_durable.current_scope() and work_id = %(work_id)s
returning *;
