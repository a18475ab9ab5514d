-- name: accepted_at
select transaction_timestamp() as accepted_at_utc;

-- name: fences
-- The active store epoch and the locked scope generation (no row: the scope is not registered).
select * from appsurface_durable.locked_scope_fences();

-- name: fences_and_cutoff
-- The fences, and the cutoff: PostgreSQL's transaction timestamp, the processor's only clock.
select f.*, transaction_timestamp() as cutoff_utc from appsurface_durable.locked_scope_fences() f;

-- name: find_command
select command_kind, schedule_id from appsurface_durable.schedule_commands
where scope_id = appsurface_durable.current_scope() and command_id = %(command_id)s;

-- name: insert_command
insert into appsurface_durable.schedule_commands
    (scope_id, command_id, schedule_id, command_kind, accepted_at_utc, generation, revision)
values (appsurface_durable.current_scope(), %(command_id)s, %(schedule_id)s, %(command_kind)s,
        %(accepted_at_utc)s, %(generation)s, %(revision)s);

-- name: insert_definition
insert into appsurface_durable.schedule_definitions
    (scope_id, schedule_id, lifecycle_state, revision, active_generation, runtime_epoch, scope_generation,
     cursor_utc, created_at_utc, updated_at_utc)
values (appsurface_durable.current_scope(), %(schedule_id)s, 'active', 1, 1, %(runtime_epoch)s,
        %(scope_generation)s, %(accepted_at_utc)s, %(accepted_at_utc)s, %(accepted_at_utc)s);

-- name: insert_generation
insert into appsurface_durable.schedule_generations
    (scope_id, schedule_id, generation, schedule_kind, at_utc, after_us, every_us, anchor_utc, anchor_explicit,
     misfire_policy, overlap_policy, run_policy, safety_window_us, target_kind, target_command, target_payload,
     accepted_at_utc, command_id)
values (appsurface_durable.current_scope(), %(schedule_id)s, %(generation)s, %(schedule_kind)s, %(at_utc)s,
        %(after_us)s, %(every_us)s, %(anchor_utc)s, %(anchor_explicit)s, %(misfire_policy)s, %(overlap_policy)s,
        %(run_policy)s, %(safety_window_us)s, %(target_kind)s, %(target_command)s, %(target_payload)s,
        %(accepted_at_utc)s, %(command_id)s);

-- name: lock_definition
select * from appsurface_durable.schedule_definitions
where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s
for update;

-- name: get_definition
select * from appsurface_durable.schedule_definitions
where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s;

-- name: list_definitions
select * from appsurface_durable.schedule_definitions
where scope_id = appsurface_durable.current_scope() and (%(include_deleted)s or lifecycle_state <> 'deleted')
order by created_at_utc, schedule_id;

-- name: lock_schedule
-- The processor's read of a claimed schedule: its dispatch row, the row's timing and the definition,
-- locked in that order, with the active generation (immutable, so not locked).
select d.dispatch_id, d.dispatch_revision, d.lease_state, t.lease_owner, def.*,
       g.generation, g.schedule_kind, g.at_utc, g.after_us, g.every_us, g.anchor_utc, g.anchor_explicit,
       g.misfire_policy, g.safety_window_us, g.target_kind, g.target_command, g.target_payload, g.accepted_at_utc
from appsurface_durable.schedule_dispatch d
join appsurface_durable.schedule_dispatch_timing t on t.dispatch_id = d.dispatch_id
join appsurface_durable.schedule_definitions def
  on def.scope_id = appsurface_durable.current_scope() and def.schedule_id = d.schedule_id
join appsurface_durable.schedule_generations g
  on g.scope_id = def.scope_id and g.schedule_id = def.schedule_id and g.generation = def.active_generation
where d.schedule_id = %(schedule_id)s
for update of d, t, def;

-- name: get_generation
select * from appsurface_durable.schedule_generations
where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s and generation = %(generation)s;

-- name: advance_definition
-- A new generation (update) or a lifecycle change (delete, suspend, release): revision moves by one.
update appsurface_durable.schedule_definitions
   set lifecycle_state = %(lifecycle_state)s, suspension_reason = %(suspension_reason)s,
       revision = revision + 1, active_generation = %(active_generation)s, runtime_epoch = %(runtime_epoch)s,
       scope_generation = %(scope_generation)s, cursor_utc = %(cursor_utc)s, updated_at_utc = transaction_timestamp()
 where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s
returning revision;

-- name: move_cursor
update appsurface_durable.schedule_definitions set cursor_utc = %(cursor_utc)s
 where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s;

-- name: supersede_pending
-- Unstarted occurrences of generations other than the active one (all of them on delete) are superseded.
update appsurface_durable.schedule_occurrences set state = 'superseded'
 where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s and state = 'pending'
   and (%(keep_generation)s::bigint is null or generation <> %(keep_generation)s::bigint)
returning generation, occurrence_kind, first_nominal_utc;

-- name: insert_dispatch
insert into appsurface_durable.schedule_dispatch (schedule_id, scope_routing_id)
values (%(schedule_id)s, %(routing_id)s)
returning dispatch_id;

-- name: insert_timing_of_schedule
-- The new schedule's dispatch row gets its timing in the same round trip as the row itself.
insert into appsurface_durable.schedule_dispatch_timing (dispatch_id, scope_id, due_at_utc, claimable_at_utc)
select d.dispatch_id, appsurface_durable.current_scope(), %(due_at_utc)s, %(due_at_utc)s
from appsurface_durable.schedule_dispatch d
where d.schedule_id = %(schedule_id)s;

-- name: lock_dispatch
select d.dispatch_id, d.dispatch_revision, d.lease_state, t.lease_owner
from appsurface_durable.schedule_dispatch d
join appsurface_durable.schedule_dispatch_timing t on t.dispatch_id = d.dispatch_id
where d.schedule_id = %(schedule_id)s
for update of d, t;

-- name: set_due
-- A client command changes the due time; a lease in progress keeps its expiry as the claimable time.
update appsurface_durable.schedule_dispatch_timing
   set due_at_utc = %(due_at_utc)s,
       claimable_at_utc = case when lease_owner is null then %(due_at_utc)s else claimable_at_utc end
 where dispatch_id = %(dispatch_id)s;

-- name: release_lease
-- The lease ends on the dispatch row (a new revision) and on its timing (due again at due_at_utc, or never).
with released as (
    update appsurface_durable.schedule_dispatch
       set lease_state = 'ready', dispatch_revision = dispatch_revision + 1
     where dispatch_id = %(dispatch_id)s
)
update appsurface_durable.schedule_dispatch_timing
   set due_at_utc = %(due_at_utc)s, claimable_at_utc = %(due_at_utc)s, lease_owner = null, lease_expires_at_utc = null
 where dispatch_id = %(dispatch_id)s;

-- name: claim
select * from appsurface_durable.claim_schedule_dispatch(%(lease_owner)s, %(lease_duration)s);

-- name: slot_busy
-- QueueOne: a materialized occurrence of any generation whose Work is not terminal occupies the slot.
-- Each occurrence's Work is looked up by its key (a subquery, never a join): a processor's session plans
-- this once, often while the tables are still empty, and a join planned then read the whole scope's
-- occurrences and Work on every call.
select exists (
    select 1 from appsurface_durable.schedule_occurrences o
    where o.scope_id = appsurface_durable.current_scope() and o.schedule_id = %(schedule_id)s
      and o.state = 'materialized'
      and (select w.state from appsurface_durable.work_items w where w.scope_id = o.scope_id and w.work_id = o.work_id)
          not in ('succeeded', 'failed', 'canceled')
) as busy;

-- name: pending_occurrences
select * from appsurface_durable.schedule_occurrences
where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s
  and generation = %(generation)s and state = 'pending'
order by occurrence_kind = 'coalesced', first_nominal_utc
for update;

-- name: pending_of_active_generation
select o.* from appsurface_durable.schedule_occurrences o
join appsurface_durable.schedule_definitions d
  on d.scope_id = o.scope_id and d.schedule_id = o.schedule_id and d.active_generation = o.generation
where o.scope_id = appsurface_durable.current_scope() and o.schedule_id = %(schedule_id)s and o.state = 'pending'
order by o.occurrence_kind = 'coalesced', o.first_nominal_utc
for update of o;

-- name: insert_occurrence
insert into appsurface_durable.schedule_occurrences
    (scope_id, schedule_id, generation, occurrence_kind, first_nominal_utc, last_nominal_utc, state, decided_at_utc)
values (appsurface_durable.current_scope(), %(schedule_id)s, %(generation)s, %(occurrence_kind)s,
        %(first_nominal_utc)s, %(last_nominal_utc)s, 'pending', transaction_timestamp());

-- name: extend_coalesced
update appsurface_durable.schedule_occurrences set last_nominal_utc = %(last_nominal_utc)s
 where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s
   and generation = %(generation)s and occurrence_kind = 'coalesced' and first_nominal_utc = %(first_nominal_utc)s
   and state = 'pending';

-- name: link_occurrence
-- Compare-or-return, first half: write the link only where none exists.
update appsurface_durable.schedule_occurrences
   set work_id = %(work_id)s, work_idempotency_key = %(work_idempotency_key)s, work_command = %(work_command)s,
       work_activity = %(work_activity)s, state = 'materialized', materialized_at_utc = transaction_timestamp()
 where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s
   and generation = %(generation)s and occurrence_kind = %(occurrence_kind)s
   and first_nominal_utc = %(first_nominal_utc)s and work_id is null
returning work_id;

-- name: stored_link
select work_id, work_idempotency_key, work_command, work_activity from appsurface_durable.schedule_occurrences
 where scope_id = appsurface_durable.current_scope() and schedule_id = %(schedule_id)s
   and generation = %(generation)s and occurrence_kind = %(occurrence_kind)s
   and first_nominal_utc = %(first_nominal_utc)s;

-- name: record_history
insert into appsurface_durable.schedule_history (scope_id, schedule_id, recorded_at_utc, event, generation, detail)
values (appsurface_durable.current_scope(), %(schedule_id)s, transaction_timestamp(), %(event)s, %(generation)s,
        %(detail)s);
