package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// workIdentity is what the bridge accepts for an occurrence, derived from its immutable identity alone.
type workIdentity struct {
	WorkID         string
	IdempotencyKey string
	Command        string
	Activity       string
}

// utcText is an instant as the protocol's canonical text: YYYY-MM-DDTHH:MM:SS.ffffffZ.
func utcText(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000") + "Z"
}

// deriveWork computes the deterministic Work identity of the adapter protocol page.
func deriveWork(scopeID, scheduleID string, generation int64, kind string, first time.Time, command string) workIdentity {
	canonical := fmt.Sprintf("%s|%s|%d|%s|%s", scopeID, scheduleID, generation, kind, utcText(first))
	sum := sha256.Sum256([]byte("appsurface-durable/schedule-work/v1|" + canonical))
	b := sum[:16]
	b[6] = (b[6] & 0x0f) | 0x80
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b)
	return workIdentity{
		WorkID:         h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32],
		IdempotencyKey: "schedule-occurrence/v1|" + canonical,
		Command:        command,
		Activity:       fmt.Sprintf("schedule/%s/g%d/%s", scheduleID, generation, kind),
	}
}
