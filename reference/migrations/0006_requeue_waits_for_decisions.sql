-- The Work-terminal requeue locks the schedule's dispatch row before it looks for a pending coalesced
-- occurrence. A decision that writes one holds that row until it commits; checking first (as 0004 did)
-- could run before that commit, find nothing, and leave the occurrence waiting for the next instant
-- instead of the next pass. Waiting for the row makes the check see it. Forward-only.

create or replace function appsurface_durable.requeue_after_work_terminal() returns trigger
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
