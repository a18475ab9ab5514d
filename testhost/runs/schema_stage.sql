-- The catalogue reads of the schema stage (testhost/schema_stage.py), all over the schema appsurface_durable.
-- PUBLIC shows as 'PUBLIC'; the owner's own privileges are left out.

-- name: relations
select c.relname as relation, c.relkind as kind, c.relrowsecurity as enabled, c.relforcerowsecurity as forced,
       (select p.relname from pg_inherits i join pg_class p on p.oid = i.inhparent where i.inhrelid = c.oid) as parent
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'appsurface_durable' and c.relkind in ('r', 'p', 'S', 'v', 'm', 'f')
order by 1;

-- name: columns
select c.relname as relation, a.attname as column_name, format_type(a.atttypid, null) as type
from pg_attribute a
join pg_class c on c.oid = a.attrelid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'appsurface_durable' and c.relkind in ('r', 'p', 'v', 'm', 'f') and a.attnum > 0
  and not a.attisdropped;

-- name: relation_grants
select c.relname as relation, coalesce(r.rolname, 'PUBLIC') as grantee, a.privilege_type as privilege
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
cross join lateral aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
left join pg_roles r on r.oid = a.grantee
where n.nspname = 'appsurface_durable' and c.relkind in ('r', 'p', 'S', 'v', 'm', 'f') and a.grantee <> c.relowner;

-- name: column_grants
select c.relname as relation, att.attname as column_name, coalesce(r.rolname, 'PUBLIC') as grantee,
       a.privilege_type as privilege
from pg_attribute att
join pg_class c on c.oid = att.attrelid
join pg_namespace n on n.oid = c.relnamespace
cross join lateral aclexplode(att.attacl) a
left join pg_roles r on r.oid = a.grantee
where n.nspname = 'appsurface_durable' and att.attacl is not null and att.attnum > 0 and not att.attisdropped;

-- name: schema_grants
select coalesce(r.rolname, 'PUBLIC') as grantee, a.privilege_type as privilege
from pg_namespace n
cross join lateral aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
left join pg_roles r on r.oid = a.grantee
where n.nspname = 'appsurface_durable' and a.grantee <> n.nspowner;

-- name: functions
-- Every routine in a schema outside the system ones (a SECURITY DEFINER function elsewhere is still a door).
select n.nspname as schema, p.proname as function, pg_get_function_identity_arguments(p.oid) as arguments,
       p.prosecdef as security_definer, coalesce(p.proconfig, '{}') as config,
       array(select coalesce(r.rolname, 'PUBLIC')
             from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
             left join pg_roles r on r.oid = a.grantee
             where a.grantee <> p.proowner and a.privilege_type = 'EXECUTE' order by 1) as executors
from pg_proc p join pg_namespace n on n.oid = p.pronamespace
where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname !~ '^pg_(toast|temp_)';

-- name: policies
select c.relname as relation, pol.polcmd as command, pol.polpermissive as permissive,
       array(select coalesce(r.rolname, 'PUBLIC') from unnest(pol.polroles) g
             left join pg_roles r on r.oid = g order by 1) as roles,
       pg_get_expr(pol.polqual, pol.polrelid) as using_expr,
       pg_get_expr(pol.polwithcheck, pol.polrelid) as check_expr
from pg_policy pol
join pg_class c on c.oid = pol.polrelid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'appsurface_durable';

-- name: roles
select rolname, rolsuper, rolbypassrls from pg_roles where rolname = any(%(roles)s);

-- name: history_children
select c.relname as relation, pg_get_expr(c.relpartbound, c.oid) as bound
from pg_inherits i join pg_class c on c.oid = i.inhrelid
where i.inhparent = to_regclass('appsurface_durable.schedule_history')
order by 1;

-- name: month_starts
-- The first instant (UTC) of the month of %(at)s and of the month after it.
select date_trunc('month', %(at)s::timestamptz at time zone 'UTC') at time zone 'UTC' as current_month,
       (date_trunc('month', %(at)s::timestamptz at time zone 'UTC') + interval '1 month') at time zone 'UTC'
           as next_month;
