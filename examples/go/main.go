// Command crashproof-go-example is a second implementation of the Durable Schedule protocol v1 (Gate A)
// processor, written from barriers/PROTOCOL.md, the spec and the normative migrations only. It offers
// `process-due` and nothing else; the TestHost performs every other operation through its fallbacks.
//
// It speaks the adapter protocol on standard input and output: newline-delimited JSON, one message a line.
// Logs go to standard error.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"time"
)

const implementationName = "crashproof-go-example 1.0 (pgx v5)"

// channel is the adapter protocol's stdio: requests in, responses and barrier hits out.
type channel struct {
	in       *bufio.Reader
	out      *bufio.Writer
	barriers bool
	// cancelled: a barrier-reply of the pass in flight said `cancel-pass`; processDue clears it as a pass starts.
	cancelled bool
}

func (c *channel) send(message map[string]any) {
	line, err := json.Marshal(message)
	if err != nil {
		log.Fatalf("cannot encode a message: %v", err)
	}
	c.out.Write(line)
	c.out.WriteByte('\n')
	if err := c.out.Flush(); err != nil {
		log.Fatalf("the host closed standard output: %v", err)
	}
}

// readMessage returns the next non-empty line as an object; io.EOF when the host closed standard input.
func (c *channel) readMessage() (map[string]any, error) {
	for {
		line, err := c.in.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return nil, err
		}
		if len(trimSpace(line)) == 0 {
			if err != nil {
				return nil, err
			}
			continue
		}
		var message map[string]any
		if jsonErr := json.Unmarshal(line, &message); jsonErr != nil {
			return nil, fmt.Errorf("not a JSON object: %v", jsonErr)
		}
		return message, nil
	}
}

// barrier reports a barrier hit and blocks until the host's barrier-reply (the host may kill us meanwhile).
func (c *channel) barrier(name string, context map[string]any) {
	if !c.barriers {
		return
	}
	c.send(map[string]any{"type": "barrier", "name": name, "context": context})
	reply, err := c.readMessage()
	if err == io.EOF {
		os.Exit(0)
	}
	if err != nil {
		log.Fatalf("waiting for the barrier-reply to %s: %v", name, err)
	}
	if reply["type"] != "barrier-reply" {
		log.Fatalf("expected a barrier-reply to %s, got %v", name, reply)
	}
	if reply["action"] == "cancel-pass" {
		c.cancelled = true // the pass's cancellation, signalled now: observed before the next lease
	}
}

func trimSpace(b []byte) []byte {
	start, end := 0, len(b)
	for start < end && (b[start] == ' ' || b[start] == '\t' || b[start] == '\r' || b[start] == '\n') {
		start++
	}
	for end > start && (b[end-1] == ' ' || b[end-1] == '\t' || b[end-1] == '\r' || b[end-1] == '\n') {
		end--
	}
	return b[start:end]
}

func deadlineFromEnv() time.Duration {
	text := os.Getenv("CRASHPROOF_DEADLINE_S")
	if text == "" {
		return 30 * time.Second
	}
	seconds, err := strconv.ParseFloat(text, 64)
	if err != nil || seconds <= 0 {
		log.Fatalf("CRASHPROOF_DEADLINE_S must be a positive number of seconds, got %q", text)
	}
	return time.Duration(seconds * float64(time.Second))
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("go-example: ")
	runtimeDSN, dispatcherDSN := os.Getenv("CRASHPROOF_RUNTIME_DSN"), os.Getenv("CRASHPROOF_DISPATCHER_DSN")
	if runtimeDSN == "" || dispatcherDSN == "" {
		log.Fatal("CRASHPROOF_RUNTIME_DSN and CRASHPROOF_DISPATCHER_DSN must be set")
	}
	ch := &channel{in: bufio.NewReader(os.Stdin), out: bufio.NewWriter(os.Stdout),
		barriers: os.Getenv("CRASHPROOF_BARRIERS") == "stdio"}
	deadline := deadlineFromEnv()
	p := &processor{
		runtime:    &session{dsn: runtimeDSN, deadline: deadline},
		dispatcher: &session{dsn: dispatcherDSN, deadline: deadline},
		ch:         ch,
		owner:      fmt.Sprintf("go-example/%d", os.Getpid()),
	}
	defer p.runtime.close()
	defer p.dispatcher.close()

	// clock_utc: this process's own wall clock, for the host to see whether a skew it asked for took effect
	// (Go reads the clock through the vDSO, not libc, so libfaketime does not reach it; PROTOCOL.md says what
	// the host does then). The processor never reads it: its cutoffs and leases come from PostgreSQL.
	// contract: the certification contract this example implements (docs/contract-changes.md).
	ch.send(map[string]any{"type": "hello", "protocol": 1, "contract": 6, "implementation": implementationName,
		"operations": []string{"process-due"},
		"clock_utc":  time.Now().UTC().Format(time.RFC3339Nano)})
	for {
		message, err := ch.readMessage()
		if err == io.EOF {
			return
		}
		if err != nil {
			ch.send(map[string]any{"type": "response", "id": nil, "outcome": "fail",
				"error": map[string]any{"kind": "bad-json", "message": err.Error(), "retriable": false}})
			continue
		}
		switch message["type"] {
		case "shutdown":
			return
		case "request":
			response := handle(p, message)
			response["type"] = "response"
			response["id"] = message["id"]
			ch.send(response)
		default:
			log.Printf("ignoring a message of type %v", message["type"])
		}
	}
}

func handle(p *processor, message map[string]any) map[string]any {
	args, _ := message["args"].(map[string]any)
	if message["op"] != "process-due" {
		return map[string]any{"outcome": "fail", "error": map[string]any{"kind": "unknown-operation",
			"message":   fmt.Sprintf("operation %v is not offered (hello lists process-due only)", message["op"]),
			"retriable": false}}
	}
	request, err := parseProcessRequest(args, p.owner)
	if err != nil {
		return map[string]any{"outcome": "fail", "error": map[string]any{"kind": "bad-arguments",
			"message": err.Error(), "retriable": false}}
	}
	return p.processDue(request)
}
