-- name: server_month
-- The server's month in UTC: a partition may be detached only once its month is over.
select to_char(transaction_timestamp() at time zone 'UTC', 'YYYY-MM') as month;

-- name: locate
-- Where a month's history table lives now: attached to schedule_history, detached, or archived.
select n.nspname as schema, c.relispartition as attached
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where c.relname = %(table)s and c.relkind = 'r'
  and n.nspname in ('appsurface_durable', 'appsurface_durable_detached', 'appsurface_durable_archive');

-- name: rows
-- Every row of one month's table in a total order (identical rows are interchangeable), for the transcript.
select scope_id, schedule_id, recorded_at_utc, event, generation, detail
from {table}
order by recorded_at_utc, scope_id, schedule_id, event, generation, detail::text;

-- name: lock
-- Parent before partition, the order every insert takes them in: no row arrives between verify and move.
lock table appsurface_durable.schedule_history, {table} in access exclusive mode;

-- name: lock_detached
lock table {table} in access exclusive mode;

-- name: detach
create schema if not exists appsurface_durable_detached;
alter table appsurface_durable.schedule_history detach partition {table};
alter table {table} set schema appsurface_durable_detached;

-- name: archive
create schema if not exists appsurface_durable_archive;
alter table {table} set schema appsurface_durable_archive;

-- name: prune
drop table {table};
