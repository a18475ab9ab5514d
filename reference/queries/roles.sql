-- name: role_attributes
select rolname, rolsuper, rolbypassrls, rolcanlogin, rolinherit
from pg_roles where rolname = any(%(roles)s);

-- name: relation_grants
-- Every table-level privilege on the schema's tables (partitions included), PUBLIC as 'PUBLIC'.
select c.relname as relation, coalesce(r.rolname, 'PUBLIC') as grantee, a.privilege_type as privilege
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
cross join lateral aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
left join pg_roles r on r.oid = a.grantee
where n.nspname = 'appsurface_durable' and c.relkind in ('r', 'p', 'S', 'v', 'm')
  and a.grantee <> c.relowner;

-- name: column_grants
select c.relname as relation, att.attname as column_name, coalesce(r.rolname, 'PUBLIC') as grantee,
       a.privilege_type as privilege
from pg_attribute att
join pg_class c on c.oid = att.attrelid
join pg_namespace n on n.oid = c.relnamespace
cross join lateral aclexplode(att.attacl) a
left join pg_roles r on r.oid = a.grantee
where n.nspname = 'appsurface_durable' and att.attacl is not null and att.attnum > 0 and not att.attisdropped;

-- name: function_grants
select p.proname as function, coalesce(r.rolname, 'PUBLIC') as grantee, a.privilege_type as privilege,
       p.prosecdef as security_definer
from pg_proc p
join pg_namespace n on n.oid = p.pronamespace
cross join lateral aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
left join pg_roles r on r.oid = a.grantee
where n.nspname = 'appsurface_durable' and a.grantee <> p.proowner;

-- name: schema_grants
select coalesce(r.rolname, 'PUBLIC') as grantee, a.privilege_type as privilege
from pg_namespace n
cross join lateral aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
left join pg_roles r on r.oid = a.grantee
where n.nspname = 'appsurface_durable' and a.grantee <> n.nspowner;

-- name: row_security
select c.relname as relation, c.relkind as kind, c.relrowsecurity as enabled, c.relforcerowsecurity as forced,
       (select coalesce(p.relname, '') from pg_inherits i join pg_class p on p.oid = i.inhparent
         where i.inhrelid = c.oid) as parent
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'appsurface_durable' and c.relkind in ('r', 'p', 'S', 'v', 'm');

-- name: policies
select c.relname as relation, pol.polname as policy, pol.polcmd as command, pol.polpermissive as permissive,
       array(select coalesce(r.rolname, 'PUBLIC') from unnest(pol.polroles) g
             left join pg_roles r on r.oid = g order by 1) as roles,
       pg_get_expr(pol.polqual, pol.polrelid) as using_expr,
       pg_get_expr(pol.polwithcheck, pol.polrelid) as check_expr
from pg_policy pol
join pg_class c on c.oid = pol.polrelid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'appsurface_durable';

-- name: enabled_triggers
-- Triggers that fire in ordinary sessions ('O': origin and local; 'A': always), partitions' clones included.
select c.relname as relation, t.tgname as trigger
from pg_trigger t
join pg_class c on c.oid = t.tgrelid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'appsurface_durable' and t.tgconstraint = 0 and t.tgenabled in ('O', 'A');
