package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
)

// The role a scoped transaction must prove it runs as before it sets the local scope.
const runtimeRole = "appsurface_durable_runtime"

// Attempts of one claimed schedule's scoped work: a failure after rollback is retried this often in all.
const maxAttempts = 3

type processRequest struct {
	maximum     int
	leaseSecs   float64
	leaseOwner  string
	cancelAfter int // -1: never
}

func parseProcessRequest(args map[string]any, defaultOwner string) (processRequest, error) {
	r := processRequest{maximum: 1, leaseSecs: 30, leaseOwner: defaultOwner, cancelAfter: -1}
	number := func(key string) (float64, bool, error) {
		v, ok := args[key]
		if !ok || v == nil {
			return 0, false, nil
		}
		f, isNumber := v.(float64)
		if !isNumber {
			return 0, false, fmt.Errorf("%s must be a number, got %v", key, v)
		}
		return f, true, nil
	}
	if v, ok, err := number("maximum_schedules"); err != nil {
		return r, err
	} else if ok {
		if v < 1 || v != float64(int(v)) {
			return r, fmt.Errorf("maximum_schedules must be a positive integer, got %v", v)
		}
		r.maximum = int(v)
	}
	if v, ok, err := number("lease_seconds"); err != nil {
		return r, err
	} else if ok {
		r.leaseSecs = v // the claim function itself refuses a lease that is not lawful
	}
	if v, ok, err := number("cancel_after"); err != nil {
		return r, err
	} else if ok {
		if v < 0 || v != float64(int(v)) {
			return r, fmt.Errorf("cancel_after must be a non-negative integer, got %v", v)
		}
		r.cancelAfter = int(v)
	}
	if v, ok := args["lease_owner"]; ok {
		owner, isString := v.(string)
		if !isString {
			return r, fmt.Errorf("lease_owner must be a string, got %v", v)
		}
		r.leaseOwner = owner
	}
	return r, nil
}

type processor struct {
	runtime    *session
	dispatcher *session
	ch         *channel
	owner      string

	counts    map[string]int
	tally     map[string]int // what the open scoped transaction did, added to counts only once it committed
	committed bool           // this pass committed something durable: a failure can no longer be a clean `fail`
}

type claim struct {
	routingID  int64
	scheduleID string
	revision   int64
}

// refusal is a request the store refused before it changed a row (an unlawful lease).
type refusal struct{ detail string }

func (r *refusal) Error() string { return r.detail }

// processDue is one bounded pass: claim, decide and bridge one schedule at a time.
func (p *processor) processDue(r processRequest) map[string]any {
	// The names of PROTOCOL.md's "Counts of a pass" (claimed, occurrences, materialized, suspended,
	// recovery_skipped), which the host holds to the committed facts, and this example's own (coalesced,
	// recovered, fenced), which it ignores.
	p.counts = map[string]int{"claimed": 0, "occurrences": 0, "materialized": 0, "suspended": 0,
		"recovery_skipped": 0, "coalesced": 0, "recovered": 0, "fenced": 0}
	p.committed = false
	p.ch.cancelled = false
	for i := 0; i < r.maximum; i++ {
		if (r.cancelAfter >= 0 && i >= r.cancelAfter) || p.ch.cancelled {
			break // cancellation is observed before the next lease; the lease in hand was finished
		}
		c, err := p.claim(r)
		if err != nil {
			return p.failure(err)
		}
		if c == nil {
			break
		}
		p.counts["claimed"]++
		if err := p.processClaimed(c); err != nil {
			return p.failure(err)
		}
	}
	value := map[string]any{}
	for k, v := range p.counts {
		value[k] = v
	}
	return map[string]any{"outcome": "ok", "value": value}
}

// failure classifies a failed pass honestly: `fail` only when nothing of this pass was committed.
func (p *processor) failure(err error) map[string]any {
	var refused *refusal
	if errors.As(err, &refused) && !p.committed {
		return map[string]any{"outcome": "fail", "problem": map[string]any{
			"type": "https://crashproof.example/problems/lease-refused", "title": "The claim was refused",
			"status": 400, "detail": refused.detail}}
	}
	e := classify(err)
	kind := "database"
	if e.unknown {
		kind = "commit-outcome-unknown"
	}
	detail := map[string]any{"kind": kind, "message": e.Error(), "retriable": e.retriable || e.unknown}
	if e.sqlstate != "" {
		detail["sqlstate"] = e.sqlstate
	}
	if e.unknown || p.committed {
		return map[string]any{"outcome": "unknown", "error": detail}
	}
	return map[string]any{"outcome": "fail", "error": detail}
}

// claim takes one due schedule under a lease in the dispatcher's own transaction; nil: nothing is due.
// A failure before COMMIT is retried after rollback; a claim whose COMMIT outcome is unknown is not repeated
// (its lease simply expires).
func (p *processor) claim(r processRequest) (*claim, error) {
	s := p.dispatcher
	for attempt := 1; ; attempt++ {
		c, err := p.claimOnce(r)
		if err == nil {
			return c, nil
		}
		var refused *refusal
		if errors.As(err, &refused) {
			return nil, err
		}
		e := classify(err)
		if e.unknown || !e.retriable || attempt == maxAttempts {
			return nil, e
		}
		log.Printf("claim attempt %d failed after rollback, retrying: %v", attempt, err)
		s.drop()
	}
}

func (p *processor) claimOnce(r processRequest) (*claim, error) {
	s := p.dispatcher
	if err := s.begin(); err != nil {
		s.rollback()
		return nil, err
	}
	var c claim
	found, err := s.row(`select scope_routing_id, schedule_id::text, dispatch_revision
	                     from appsurface_durable.claim_schedule_dispatch($1, make_interval(secs => $2::float8))`,
		[]any{&c.routingID, &c.scheduleID, &c.revision}, r.leaseOwner, r.leaseSecs)
	if err != nil {
		s.rollback()
		if e := classify(err); e.sqlstate == "22023" {
			return nil, &refusal{detail: e.Error()}
		}
		return nil, err
	}
	if !found {
		s.rollback() // nothing was written
		return nil, nil
	}
	context := map[string]any{"schedule_id": c.scheduleID, "dispatch_revision": c.revision}
	p.ch.barrier("schedule-claim-before-commit", context)
	if err := s.commit(); err != nil {
		return nil, err
	}
	p.committed = true
	p.ch.barrier("schedule-claim-after-commit", context)
	return &c, nil
}

// processClaimed runs the scoped transactions of one claimed schedule, retrying after a rollback. A repeat is
// safe: each transaction re-reads everything under the dispatch-revision fence.
func (p *processor) processClaimed(c *claim) error {
	for attempt := 1; ; attempt++ {
		err := p.scoped(c)
		if err == nil {
			return nil
		}
		e := classify(err)
		if e.unknown || !e.retriable || attempt == maxAttempts {
			return e
		}
		log.Printf("schedule %s attempt %d failed after rollback, retrying: %v", c.scheduleID, attempt, err)
		p.runtime.drop()
	}
}

func (p *processor) scoped(c *claim) error {
	bridgeNext, err := p.decide(c)
	if err != nil || !bridgeNext {
		return err
	}
	return p.bridge(c)
}

// locked is a claimed schedule as its scoped transaction reads it, rows locked.
type locked struct {
	scopeID    string
	dispatchID int64
	lifecycle  string
	epoch      int64
	scopeGen   int64
	cursor     time.Time
	gen        generation
	cutoff     time.Time
	storeEpoch int64
	storeScope int64
}

// open begins a scoped transaction: proves the role, sets the local scope, locks the dispatch row, its
// timing and the definition (in that order), and reads the fences and the cutoff. nil: fenced (the lease
// was taken over or released, or the schedule was deleted); the transaction is then rolled back.
func (p *processor) open(c *claim) (*locked, error) {
	s := p.runtime
	p.tally = map[string]int{} // a transaction rolled back and retried counts nothing of its first attempt
	if err := s.begin(); err != nil {
		s.rollback()
		return nil, err
	}
	fail := func(err error) (*locked, error) { s.rollback(); return nil, err }
	l := &locked{}
	found, err := s.row(`select appsurface_durable.set_local_scope(x.scope_id)
	                     from (select appsurface_durable.scope_for_routing_id($1) as scope_id) x
	                     where current_user = $2 and x.scope_id is not null`,
		[]any{&l.scopeID}, c.routingID, runtimeRole)
	if err != nil {
		return fail(err)
	}
	if !found {
		return fail(&dbError{err: fmt.Errorf("the runtime connection is not %s, or routing ID %d has no scope: "+
			"refusing to set a scope", runtimeRole, c.routingID)})
	}
	var revision int64
	var leaseState string
	g := &l.gen
	found, err = s.row(`
		select d.dispatch_id, d.dispatch_revision, d.lease_state,
		       def.lifecycle_state, def.runtime_epoch, def.scope_generation, def.cursor_utc,
		       g.generation, g.schedule_kind, g.at_utc, g.after_us, g.every_us, g.anchor_utc, g.misfire_policy,
		       g.safety_window_us, g.target_command, g.target_payload::text, g.accepted_at_utc
		from appsurface_durable.schedule_dispatch d
		join appsurface_durable.schedule_dispatch_timing t on t.dispatch_id = d.dispatch_id
		join appsurface_durable.schedule_definitions def
		  on def.scope_id = appsurface_durable.current_scope() and def.schedule_id = d.schedule_id
		join appsurface_durable.schedule_generations g
		  on g.scope_id = def.scope_id and g.schedule_id = def.schedule_id and g.generation = def.active_generation
		where d.schedule_id = $1::uuid
		for update of d, t, def`,
		[]any{&l.dispatchID, &revision, &leaseState, &l.lifecycle, &l.epoch, &l.scopeGen, &l.cursor,
			&g.Number, &g.Kind, &g.At, &g.AfterUs, &g.EveryUs, &g.Anchor, &g.Misfire, &g.WindowUs, &g.Command,
			&g.Payload, &g.AcceptedAt}, c.scheduleID)
	if err != nil {
		return fail(err)
	}
	if !found || revision != c.revision || leaseState != "leased" {
		s.rollback()
		p.counts["fenced"]++
		return nil, nil
	}
	found, err = s.row(`select f.runtime_epoch, f.scope_generation, transaction_timestamp()
	                    from appsurface_durable.locked_scope_fences() f`,
		[]any{&l.storeEpoch, &l.storeScope, &l.cutoff})
	if err != nil {
		return fail(err)
	}
	if !found {
		return fail(&dbError{err: fmt.Errorf("scope %s is not registered", l.scopeID)})
	}
	return l, nil
}

// finish hits the before-commit barrier, commits, and hits the after-commit barrier.
func (p *processor) finish(s *session, before, after string, context map[string]any) error {
	p.ch.barrier(before, context)
	if err := s.commit(); err != nil {
		return err // unknown or failed: what this transaction did is not counted
	}
	p.committed = true
	for name, n := range p.tally {
		p.counts[name] += n
	}
	p.tally = map[string]int{}
	p.ch.barrier(after, context)
	return nil
}

func (p *processor) history(scheduleID, event string, generation int64, detail map[string]any) error {
	text, _ := json.Marshal(detail)
	return p.runtime.exec(`insert into appsurface_durable.schedule_history
	                         (scope_id, schedule_id, recorded_at_utc, event, generation, detail)
	                       values (appsurface_durable.current_scope(), $1::uuid, transaction_timestamp(), $2, $3, $4::jsonb)`,
		scheduleID, event, generation, string(text))
}

// release ends the lease: a new dispatch revision, and the schedule due again at `due` (nil: never).
func (p *processor) release(l *locked, due *time.Time) error {
	return p.runtime.exec(`
		with ready as (
		    update appsurface_durable.schedule_dispatch
		       set lease_state = 'ready', dispatch_revision = dispatch_revision + 1
		     where dispatch_id = $1)
		update appsurface_durable.schedule_dispatch_timing
		   set due_at_utc = $2, claimable_at_utc = $2, lease_owner = null, lease_expires_at_utc = null
		 where dispatch_id = $1`, l.dispatchID, due)
}

// suspend stops the schedule (revision moves), records why, and releases the lease with nothing due.
func (p *processor) suspend(c *claim, l *locked, reason string, detail map[string]any) error {
	if err := p.runtime.exec(`
		update appsurface_durable.schedule_definitions
		   set lifecycle_state = 'suspended', suspension_reason = $2, revision = revision + 1,
		       updated_at_utc = transaction_timestamp()
		 where scope_id = appsurface_durable.current_scope() and schedule_id = $1::uuid`, c.scheduleID, reason); err != nil {
		return err
	}
	detail["reason"] = reason
	detail["cursor_utc"] = utcText(l.cursor)
	if err := p.history(c.scheduleID, "suspended", l.gen.Number, detail); err != nil {
		return err
	}
	p.tally["suspended"]++
	return p.release(l, nil)
}

// pendingOccurrence is a pending occurrence of the active generation.
type pendingOccurrence struct {
	kind  string
	first time.Time
	last  time.Time
}

// slotState reads whether a materialized target of any generation is still nonterminal, and locks the
// active generation's pending occurrences (oldest non-coalesced first, the coalesced one last).
func (p *processor) slotState(c *claim, l *locked) (started bool, pending []pendingOccurrence, err error) {
	_, err = p.runtime.row(`
		select exists (
		    select 1 from appsurface_durable.schedule_occurrences o
		    join appsurface_durable.work_items w on w.scope_id = o.scope_id and w.work_id = o.work_id
		    where o.scope_id = appsurface_durable.current_scope() and o.schedule_id = $1::uuid
		      and o.state = 'materialized' and w.state not in ('succeeded', 'failed', 'canceled'))`,
		[]any{&started}, c.scheduleID)
	if err != nil {
		return
	}
	err = p.runtime.rows(`
		select occurrence_kind, first_nominal_utc, last_nominal_utc from appsurface_durable.schedule_occurrences
		where scope_id = appsurface_durable.current_scope() and schedule_id = $1::uuid and generation = $2
		  and state = 'pending'
		order by occurrence_kind = 'coalesced', first_nominal_utc
		for update`, func(r pgx.Rows) error {
		var o pendingOccurrence
		if err := r.Scan(&o.kind, &o.first, &o.last); err != nil {
			return err
		}
		pending = append(pending, o)
		return nil
	}, c.scheduleID, l.gen.Number)
	return
}

// decide is the scoped decision transaction: fences, the due instants in (cursor, cutoff], their
// disposition and the cursor move, together. It says whether a bridge should follow in this pass; when none
// does, the lease is released here.
func (p *processor) decide(c *claim) (bool, error) {
	s := p.runtime
	l, err := p.open(c)
	if err != nil || l == nil {
		return false, err
	}
	fail := func(err error) (bool, error) { s.rollback(); return false, err }
	context := map[string]any{"schedule_id": c.scheduleID, "dispatch_revision": c.revision}
	g := &l.gen
	bridgeNext := false
	switch {
	case l.lifecycle != "active":
		if err := p.release(l, nil); err != nil {
			return fail(err)
		}
	case l.epoch != l.storeEpoch:
		if err := p.suspend(c, l, "runtime-epoch", map[string]any{"schedule_epoch": l.epoch,
			"store_epoch": l.storeEpoch}); err != nil {
			return fail(err)
		}
	case l.scopeGen != l.storeScope:
		if err := p.suspend(c, l, "scope-generation", map[string]any{"schedule_scope_generation": l.scopeGen,
			"scope_generation": l.storeScope}); err != nil {
			return fail(err)
		}
	default:
		cursor, cutoff := micros(l.cursor), micros(l.cutoff)
		first, last, count := g.due(cursor, cutoff)
		if count > 0 && cutoff-first > g.WindowUs {
			context["suspension"] = "clock-anomaly"
			if err := p.suspend(c, l, "clock-anomaly", map[string]any{"cutoff_utc": utcText(l.cutoff),
				"first_nominal_utc": utcText(instant(first)), "lateness_us": cutoff - first,
				"safety_window_us": g.WindowUs}); err != nil {
				return fail(err)
			}
			break
		}
		started, pending, err := p.slotState(c, l)
		if err != nil {
			return fail(err)
		}
		if count > 0 {
			waiting, err := p.dispose(c, l, first, last, count, started || len(pending) > 0, pending)
			if err != nil {
				return fail(err)
			}
			pending = append(pending, waiting...)
			if err := s.exec(`update appsurface_durable.schedule_definitions set cursor_utc = $2
			                  where scope_id = appsurface_durable.current_scope() and schedule_id = $1::uuid`,
				c.scheduleID, l.cutoff); err != nil {
				return fail(err)
			}
			l.cursor = l.cutoff
			context["cutoff_utc"] = utcText(l.cutoff)
			context["instants"] = count
		}
		bridgeNext = !started && len(pending) > 0
		if !bridgeNext {
			if err := p.release(l, g.next(micros(l.cursor))); err != nil {
				return fail(err)
			}
		}
	}
	if err := p.finish(s, "schedule-decision-before-commit", "schedule-decision-after-commit", context); err != nil {
		return false, err
	}
	return bridgeNext, nil
}

// dispose writes the disposition of the due instants [first, last]: one nominal occurrence, one recovery
// range (or, with misfire policy skip, only its declaration), or, while the slot is held, the one pending
// coalesced occurrence. It returns a new occurrence that now waits for a bridge, if any.
func (p *processor) dispose(c *claim, l *locked, first, last, count int64, slotHeld bool,
	pending []pendingOccurrence) ([]pendingOccurrence, error) {
	s, g := p.runtime, &l.gen
	kind := "nominal"
	if count > 1 {
		kind = "recovery"
		detail := map[string]any{"first_nominal_utc": utcText(instant(first)),
			"last_nominal_utc": utcText(instant(last)), "count": count, "misfire_policy": g.Misfire}
		event := "recovery-declared"
		if g.Misfire == "skip" {
			event = "recovery-skipped"
		}
		if err := p.history(c.scheduleID, event, g.Number, detail); err != nil {
			return nil, err
		}
		if g.Misfire == "skip" {
			p.tally["recovery_skipped"]++
			return nil, nil
		}
		p.tally["recovered"]++
	}
	if slotHeld {
		p.tally["coalesced"]++
		for _, o := range pending {
			if o.kind == "coalesced" {
				if micros(o.last) >= last {
					return nil, nil
				}
				return nil, s.exec(`update appsurface_durable.schedule_occurrences set last_nominal_utc = $4
				                    where scope_id = appsurface_durable.current_scope() and schedule_id = $1::uuid
				                      and generation = $2 and occurrence_kind = 'coalesced'
				                      and first_nominal_utc = $3 and state = 'pending'`,
					c.scheduleID, g.Number, o.first, instant(last))
			}
		}
		kind = "coalesced"
	} else {
		p.tally["occurrences"]++
	}
	err := s.exec(`insert into appsurface_durable.schedule_occurrences
	                 (scope_id, schedule_id, generation, occurrence_kind, first_nominal_utc, last_nominal_utc, state,
	                  decided_at_utc)
	               values (appsurface_durable.current_scope(), $1::uuid, $2, $3, $4, $5, 'pending', transaction_timestamp())`,
		c.scheduleID, g.Number, kind, instant(first), instant(last))
	if err != nil {
		return nil, err
	}
	return []pendingOccurrence{{kind: kind, first: instant(first), last: instant(last)}}, nil
}

// bridge is the scoped bridge transaction: the oldest pending occurrence's Work is accepted through the
// Work store's transaction writer (an insert, or the Work already under its idempotency key), the link is
// written compare-or-return, and the lease is released, all in one transaction.
func (p *processor) bridge(c *claim) error {
	s := p.runtime
	l, err := p.open(c)
	if err != nil || l == nil {
		return err
	}
	fail := func(err error) error { s.rollback(); return err }
	g := &l.gen
	context := map[string]any{"schedule_id": c.scheduleID, "dispatch_revision": c.revision}
	if l.lifecycle != "active" || l.epoch != l.storeEpoch || l.scopeGen != l.storeScope {
		// Something changed since the decision: the next pass decides afresh.
		if err := p.release(l, g.next(micros(l.cursor))); err != nil {
			return fail(err)
		}
		return p.finish(s, "schedule-bridge-before-commit", "schedule-link-after-commit", context)
	}
	started, pending, err := p.slotState(c, l)
	if err != nil {
		return fail(err)
	}
	if started || len(pending) == 0 {
		if err := p.release(l, g.next(micros(l.cursor))); err != nil {
			return fail(err)
		}
		return p.finish(s, "schedule-bridge-before-commit", "schedule-link-after-commit", context)
	}
	o := pending[0]
	want := deriveWork(l.scopeID, c.scheduleID, g.Number, o.kind, o.first, g.Command)
	context["work_id"] = want.WorkID
	context["occurrence_kind"] = o.kind
	context["first_nominal_utc"] = utcText(o.first)

	var got workIdentity
	var workState string
	found, err := s.row(`
		with inserted as (
		    insert into appsurface_durable.work_items (scope_id, work_id, idempotency_key, command, activity, payload)
		    values (appsurface_durable.current_scope(), $1::uuid, $2, $3, $4, $5::jsonb)
		    on conflict (scope_id, idempotency_key) do nothing
		    returning work_id::text, idempotency_key, command, activity, state)
		select * from inserted
		union all
		select work_id::text, idempotency_key, command, activity, state from appsurface_durable.work_items
		where scope_id = appsurface_durable.current_scope() and idempotency_key = $2
		  and not exists (select from inserted)`,
		[]any{&got.WorkID, &got.IdempotencyKey, &got.Command, &got.Activity, &workState},
		want.WorkID, want.IdempotencyKey, want.Command, want.Activity, g.Payload)
	if err != nil {
		return fail(err)
	}
	if !found {
		// Another transaction committed the key after this statement's snapshot: read it now.
		found, err = s.row(`select work_id::text, idempotency_key, command, activity, state
		                    from appsurface_durable.work_items
		                    where scope_id = appsurface_durable.current_scope() and idempotency_key = $1`,
			[]any{&got.WorkID, &got.IdempotencyKey, &got.Command, &got.Activity, &workState}, want.IdempotencyKey)
		if err != nil {
			return fail(err)
		}
		if !found {
			return fail(&dbError{err: fmt.Errorf("no Work under key %s after the insert", want.IdempotencyKey),
				retriable: true})
		}
	}
	p.ch.barrier("schedule-work-after-acceptance", context)

	conflict := func(stored workIdentity) error {
		context["conflict"] = true
		return p.suspend(c, l, "idempotency-conflict", map[string]any{
			"occurrence_kind": o.kind, "first_nominal_utc": utcText(o.first),
			"expected": want, "found": stored})
	}
	if got != want {
		if err := conflict(got); err != nil {
			return fail(err)
		}
		return p.finish(s, "schedule-bridge-before-commit", "schedule-link-after-commit", context)
	}
	var linked string
	found, err = s.row(`
		update appsurface_durable.schedule_occurrences
		   set work_id = $5::uuid, work_idempotency_key = $6, work_command = $7, work_activity = $8,
		       state = 'materialized', materialized_at_utc = transaction_timestamp()
		 where scope_id = appsurface_durable.current_scope() and schedule_id = $1::uuid and generation = $2
		   and occurrence_kind = $3 and first_nominal_utc = $4 and work_id is null
		returning work_id::text`, []any{&linked},
		c.scheduleID, g.Number, o.kind, o.first, want.WorkID, want.IdempotencyKey, want.Command, want.Activity)
	if err != nil {
		return fail(err)
	}
	if !found {
		var stored workIdentity
		if _, err := s.row(`
			select coalesce(work_id::text, ''), coalesce(work_idempotency_key, ''), coalesce(work_command, ''),
			       coalesce(work_activity, '')
			from appsurface_durable.schedule_occurrences
			where scope_id = appsurface_durable.current_scope() and schedule_id = $1::uuid and generation = $2
			  and occurrence_kind = $3 and first_nominal_utc = $4`,
			[]any{&stored.WorkID, &stored.IdempotencyKey, &stored.Command, &stored.Activity},
			c.scheduleID, g.Number, o.kind, o.first); err != nil {
			return fail(err)
		}
		if stored != want {
			if err := conflict(stored); err != nil {
				return fail(err)
			}
			return p.finish(s, "schedule-bridge-before-commit", "schedule-link-after-commit", context)
		}
	}
	// The new Work holds the slot unless it is already terminal; then what waits behind it is due now.
	due := g.next(micros(l.cursor))
	if len(pending) > 1 && (workState == "succeeded" || workState == "failed" || workState == "canceled") {
		due = &l.cutoff
	}
	if err := p.release(l, due); err != nil {
		return fail(err)
	}
	if err := p.finish(s, "schedule-bridge-before-commit", "schedule-link-after-commit", context); err != nil {
		return err
	}
	p.counts["materialized"]++
	return nil
}
