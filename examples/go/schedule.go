package main

import (
	"time"
)

// generation is the active generation's timing and target, as read from schedule_generations.
type generation struct {
	Number     int64
	Kind       string // at, after, every
	At         *time.Time
	AfterUs    *int64
	EveryUs    *int64
	Anchor     *time.Time
	AcceptedAt time.Time
	Misfire    string // run-once, skip
	WindowUs   int64
	Command    string
	Payload    string
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func instant(us int64) time.Time { return time.UnixMicro(us).UTC() }

// floorDiv divides rounding toward negative infinity (the grid extends before its anchor too).
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// single is the one nominal instant of an At or After generation.
func (g *generation) single() int64 {
	if g.Kind == "at" {
		return micros(*g.At)
	}
	return micros(g.AcceptedAt) + *g.AfterUs
}

// due returns the nominal instants t with start < t <= end: the first, the last and how many.
func (g *generation) due(start, end int64) (first, last, count int64) {
	if end <= start {
		return 0, 0, 0
	}
	if g.Kind != "every" {
		t := g.single()
		if start < t && t <= end {
			return t, t, 1
		}
		return 0, 0, 0
	}
	anchor, every := micros(*g.Anchor), *g.EveryUs
	nFirst := floorDiv(start-anchor, every) + 1
	nLast := floorDiv(end-anchor, every)
	if nLast < nFirst {
		return 0, 0, 0
	}
	return anchor + nFirst*every, anchor + nLast*every, nLast - nFirst + 1
}

// next is the first nominal instant after the cursor, or nil when the generation has none left.
func (g *generation) next(cursor int64) *time.Time {
	if g.Kind != "every" {
		t := g.single()
		if t > cursor {
			v := instant(t)
			return &v
		}
		return nil
	}
	anchor, every := micros(*g.Anchor), *g.EveryUs
	v := instant(anchor + (floorDiv(cursor-anchor, every)+1)*every)
	return &v
}
