package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// session is one kept connection with the client-side deadline on every round trip. A connection that
// failed is dropped and a new one opened on the next use: after a fault the kept one is often dead.
type session struct {
	dsn      string
	deadline time.Duration
	conn     *pgx.Conn
}

// dbError is a failed round trip, classified. unknown: the COMMIT was sent and its reply never came, so the
// transaction may or may not have committed. Otherwise the transaction was rolled back.
type dbError struct {
	err       error
	retriable bool
	unknown   bool
	sqlstate  string
}

func (e *dbError) Error() string { return e.err.Error() }

// classify says whether a failed statement may be retried after rollback: a lost connection, a deadline,
// and the SQLSTATEs of transient conditions (08 connection, 40 rollback, 53 resources, 57P01-03 shutdown,
// 57014 canceled, 55P03 lock not available).
func classify(err error) *dbError {
	var known *dbError
	if errors.As(err, &known) {
		return known
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		retriable := strings.HasPrefix(code, "08") || strings.HasPrefix(code, "40") || strings.HasPrefix(code, "53") ||
			code == "57P01" || code == "57P02" || code == "57P03" || code == "57014" || code == "55P03"
		return &dbError{err: err, retriable: retriable, sqlstate: code}
	}
	return &dbError{err: err, retriable: true} // the connection failed or the deadline passed
}

func (s *session) roundTrip() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.deadline)
}

func (s *session) ensure() error {
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.drop()
	config, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return &dbError{err: fmt.Errorf("bad DSN: %w", err)}
	}
	config.RuntimeParams["application_name"] = "crashproof-go-example"
	ctx, cancel := s.roundTrip()
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return classify(err)
	}
	s.conn = conn
	return nil
}

func (s *session) drop() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		s.conn.Close(ctx)
		cancel()
		s.conn = nil
	}
}

func (s *session) close() { s.drop() }

// exec runs one statement within the deadline.
func (s *session) exec(sql string, args ...any) error {
	ctx, cancel := s.roundTrip()
	defer cancel()
	_, err := s.conn.Exec(ctx, sql, args...)
	if err != nil {
		return classify(err)
	}
	return nil
}

// rows runs one query within the deadline and hands every row to scan.
func (s *session) rows(sql string, scan func(pgx.Rows) error, args ...any) error {
	ctx, cancel := s.roundTrip()
	defer cancel()
	rows, err := s.conn.Query(ctx, sql, args...)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return classify(err)
		}
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	return nil
}

// row runs a query expected to return at most one row; found says whether it did.
func (s *session) row(sql string, dest []any, args ...any) (found bool, err error) {
	err = s.rows(sql, func(r pgx.Rows) error { found = true; return r.Scan(dest...) }, args...)
	return found, err
}

func (s *session) begin() error {
	if err := s.ensure(); err != nil {
		return err
	}
	return s.exec("begin")
}

// commit sends COMMIT. A reply that is an error from the server means it rolled back; no reply at all (the
// connection died or the deadline passed) means the outcome is unknown.
func (s *session) commit() error {
	err := s.exec("commit")
	if err == nil {
		return nil
	}
	failed := classify(err)
	var pgErr *pgconn.PgError
	if !errors.As(failed.err, &pgErr) {
		failed.unknown = true
		s.drop()
	}
	return failed
}

// rollback ends a failed transaction; a connection that cannot even roll back is dropped (the server
// rolls back a transaction whose connection is gone).
func (s *session) rollback() {
	if s.conn == nil || s.conn.IsClosed() {
		s.drop()
		return
	}
	if err := s.exec("rollback"); err != nil {
		log.Printf("rollback failed, dropping the connection: %v", err)
		s.drop()
	}
}
