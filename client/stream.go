package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"

	"github.com/airlock-sandbox/airlock/api"
)

// Stream reads the NDJSON events of one streamed call (exec, code) as
// the server sends them: each event is handed out as soon as its line
// has arrived. Keepalive events are skipped. Close it, or read it to its
// end; closing it early cancels the call on the server.
type Stream[E any] struct {
	body  io.ReadCloser
	dec   *json.Decoder
	ev    E
	err   error
	close sync.Once
}

func newStream[E any](body io.ReadCloser) *Stream[E] {
	return &Stream[E]{body: body, dec: json.NewDecoder(body)}
}

// Next reads the next event; false at the end of the stream or on an
// error (see Err).
func (s *Stream[E]) Next() bool {
	if s.err != nil {
		return false
	}
	for {
		var raw json.RawMessage
		if err := s.dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				s.err = io.EOF
			} else {
				s.err = fmt.Errorf("airlock stream: %w", err)
			}
			s.Close()
			return false
		}
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			s.err = fmt.Errorf("airlock stream: %w", err)
			s.Close()
			return false
		}
		if head.Type == api.EventKeepalive {
			continue
		}
		var ev E
		if err := json.Unmarshal(raw, &ev); err != nil {
			s.err = fmt.Errorf("airlock stream: a %s event: %w", head.Type, err)
			s.Close()
			return false
		}
		s.ev = ev
		return true
	}
}

// Event is the event Next read.
func (s *Stream[E]) Event() E { return s.ev }

// Err is the error that ended the stream; nil at its regular end.
func (s *Stream[E]) Err() error {
	if errors.Is(s.err, io.EOF) {
		return nil
	}
	return s.err
}

// All iterates over the events; an error ends the iteration as its last
// pair. Breaking out of the loop closes the stream.
func (s *Stream[E]) All() iter.Seq2[E, error] {
	return func(yield func(E, error) bool) {
		defer s.Close()
		for s.Next() {
			if !yield(s.ev, nil) {
				return
			}
		}
		if err := s.Err(); err != nil {
			var zero E
			yield(zero, err)
		}
	}
}

// Close ends the stream; the server cancels the call if it still runs.
func (s *Stream[E]) Close() error {
	var err error
	s.close.Do(func() { err = s.body.Close() })
	return err
}

// streamError is the *api.Error of an error event, with the status its
// code stands for (the stream itself answered 200).
func streamError(e *api.Error) *api.Error {
	if e == nil {
		return &api.Error{Code: api.CodeInternal, Message: "an error event without an error", Status: 500}
	}
	out := *e
	out.Status = api.StatusOf(e.Code)
	return &out
}
