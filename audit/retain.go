package audit

import (
	"context"
	"log/slog"
	"time"
)

// RetainOptions configure Retain.
type RetainOptions struct {
	// Keep is how long records are kept; 0 keeps them for ever (Retain
	// returns at once).
	Keep time.Duration
	// Every is how often old records are looked for; 0 means a tenth of
	// Keep, between a second and an hour.
	Every time.Duration
	// Now replaces the clock, for tests.
	Now func() time.Time
	// Logger receives what was pruned and what failed; nil discards it.
	Logger *slog.Logger
}

// Retain removes the records of s older than o.Keep, at once and then
// every o.Every, until ctx ends.
func Retain(ctx context.Context, s Store, o RetainOptions) {
	if o.Keep <= 0 {
		return
	}
	if o.Every <= 0 {
		o.Every = min(max(o.Keep/10, time.Second), time.Hour)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(o.Every)
	defer t.Stop()
	for {
		before := o.Now().Add(-o.Keep)
		n, err := s.Prune(ctx, before)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			o.Logger.Error("pruning the audit log", "err", err)
		case n > 0:
			o.Logger.Info("pruned the audit log", "records", n, "before", before.UTC().Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
