// Package audittest is the suite every audit.Store passes: appends and
// queries, paging, tenant isolation, listing across tenants, pruning, IDs
// that are never reused, bounds, concurrency and Close. A new Store (a
// database shared by several servers, say) runs it from its own tests.
package audittest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Open returns a new, empty Store; the suite closes it (Close twice must
// be harmless).
type Open func(t *testing.T) audit.Store

// Run runs the suite, each test on a Store of its own.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		f    func(*testing.T, audit.Store)
	}{
		{"AppendQuery", testAppendQuery},
		{"Paging", testPaging},
		{"TenantIsolation", testTenantIsolation},
		{"List", testList},
		{"Prune", testPrune},
		{"IDsNotReused", testIDsNotReused},
		{"Bounds", testBounds},
		{"Concurrent", testConcurrent},
		{"BadArguments", testBadArguments},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.f(t, s)
		})
	}
}

// base is the time of the suite's records.
var base = time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)

func rec(tenant, kind, what string, at time.Time) api.AuditRecord {
	return api.AuditRecord{Time: at, Tenant: tenant, Kind: kind, What: what}
}

func appendAll(t *testing.T, s audit.Store, recs ...api.AuditRecord) {
	t.Helper()
	if err := s.Append(context.Background(), recs...); err != nil {
		t.Fatalf("append: %v", err)
	}
}

func query(t *testing.T, s audit.Store, tenant string, after int64, limit int) []api.AuditRecord {
	t.Helper()
	got, err := s.Query(context.Background(), tenant, after, limit)
	if err != nil {
		t.Fatalf("query %s after %d: %v", tenant, after, err)
	}
	return got
}

func whats(recs []api.AuditRecord) string {
	w := make([]string, len(recs))
	for i, r := range recs {
		w[i] = r.What
	}
	return strings.Join(w, ",")
}

// checkOrder fails unless the IDs are positive and increasing.
func checkOrder(t *testing.T, recs []api.AuditRecord) {
	t.Helper()
	for i, r := range recs {
		if r.ID <= 0 || i > 0 && r.ID <= recs[i-1].ID {
			t.Fatalf("record %d has id %d after %d: ids must be positive and increase", i, r.ID, recs[max(i-1, 0)].ID)
		}
	}
}

func testAppendQuery(t *testing.T, s audit.Store) {
	full := api.AuditRecord{Time: base, Tenant: "alice", Kind: "exec", Session: "s1", Backend: "native", What: "python3 -c 'print(1)'",
		ExitCode: 137, TimedOut: true, OOMKilled: true, PidsLimitHit: true, DurationMS: 12.5, Bytes: 1 << 40, Detail: "error: x"}
	appendAll(t, s, full, rec("bob", "exec", "b1", base), rec("alice", "artifact", "a2", base.Add(time.Second)))
	got := query(t, s, "alice", 0, 10)
	if len(got) != 2 {
		t.Fatalf("alice's records: %+v, want 2", got)
	}
	checkOrder(t, got)
	want := full
	want.ID = got[0].ID
	if got[0] != want {
		t.Errorf("round trip:\n got %+v\nwant %+v", got[0], want)
	}
	if got[0].Time.Location() != time.UTC || !got[0].Time.Equal(base) {
		t.Errorf("time %v, want %v in UTC", got[0].Time, base)
	}
	if got[1].What != "a2" || got[1].Kind != "artifact" {
		t.Errorf("second record %+v", got[1])
	}
	// A record without a time gets the current one.
	before := time.Now().Add(-time.Minute)
	appendAll(t, s, rec("carol", "exec", "now", time.Time{}))
	c := query(t, s, "carol", 0, 1)
	if len(c) != 1 || c[0].Time.Before(before) || c[0].Time.After(time.Now().Add(time.Minute)) {
		t.Errorf("a record without a time: %+v, want about now", c)
	}
	if err := s.Append(context.Background()); err != nil {
		t.Errorf("appending nothing: %v", err)
	}
}

func testPaging(t *testing.T, s audit.Store) {
	var recs []api.AuditRecord
	for i := range 25 {
		recs = append(recs, rec("alice", "exec", fmt.Sprint(i), base.Add(time.Duration(i)*time.Millisecond)))
		recs = append(recs, rec("bob", "exec", fmt.Sprint(i), base))
	}
	appendAll(t, s, recs...)
	var all []api.AuditRecord
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		page := query(t, s, "alice", after, 10)
		all = append(all, page...)
		if len(page) < 10 {
			break
		}
		after = page[len(page)-1].ID
	}
	checkOrder(t, all)
	var want []string
	for i := range 25 {
		want = append(want, fmt.Sprint(i))
	}
	if got := whats(all); got != strings.Join(want, ",") {
		t.Errorf("pages of 10 gave %s", got)
	}
	if rest := query(t, s, "alice", all[len(all)-1].ID, 10); len(rest) != 0 {
		t.Errorf("after the last record: %+v", rest)
	}
}

func testTenantIsolation(t *testing.T, s audit.Store) {
	// Names that a LIKE or a prefix match would confuse.
	tenants := []string{"abc", "a_c", "a%", "ab", "abcd", "ABC"}
	for _, tn := range tenants {
		appendAll(t, s, rec(tn, "exec", tn, base))
	}
	for _, tn := range tenants {
		got := query(t, s, tn, 0, 100)
		if len(got) != 1 || got[0].Tenant != tn || got[0].What != tn {
			t.Errorf("tenant %q sees %+v, want only its own record", tn, got)
		}
	}
	if got := query(t, s, "nobody", 0, 100); len(got) != 0 {
		t.Errorf("a tenant without records sees %+v", got)
	}
	if _, err := s.Query(context.Background(), "", 0, 100); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a query for no tenant: %v, want ErrInvalid (never every tenant's records)", err)
	}
}

func testList(t *testing.T, s audit.Store) {
	for i := range 6 {
		tn := []string{"alice", "bob"}[i%2]
		appendAll(t, s, rec(tn, "exec", fmt.Sprint(i), base.Add(time.Duration(i)*time.Hour)))
	}
	ctx := context.Background()
	list := func(f audit.Filter) string {
		t.Helper()
		got, err := s.List(ctx, f)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		checkOrder(t, got)
		return whats(got)
	}
	if got := list(audit.Filter{}); got != "0,1,2,3,4,5" {
		t.Errorf("every tenant: %s", got)
	}
	if got := list(audit.Filter{Tenant: "bob"}); got != "1,3,5" {
		t.Errorf("bob: %s", got)
	}
	if got := list(audit.Filter{Since: base.Add(2 * time.Hour)}); got != "2,3,4,5" {
		t.Errorf("since the third hour: %s", got)
	}
	if got := list(audit.Filter{Limit: 2, Last: true}); got != "4,5" {
		t.Errorf("the last two: %s", got)
	}
	if got := list(audit.Filter{Tenant: "alice", Limit: 2, Last: true, Since: base.Add(time.Hour)}); got != "2,4" {
		t.Errorf("alice's last two since the second hour: %s", got)
	}
	if got := list(audit.Filter{Limit: 2}); got != "0,1" {
		t.Errorf("the first two: %s", got)
	}
	all, _ := s.List(ctx, audit.Filter{})
	if got := list(audit.Filter{After: all[3].ID}); got != "4,5" {
		t.Errorf("after the fourth: %s", got)
	}
}

func testPrune(t *testing.T, s audit.Store) {
	for i := range 10 {
		appendAll(t, s, rec("alice", "exec", fmt.Sprint(i), base.Add(time.Duration(i)*time.Hour)))
	}
	n, err := s.Prune(context.Background(), base.Add(4*time.Hour))
	if err != nil || n != 4 {
		t.Fatalf("prune before the fifth hour: %d, %v; want 4", n, err)
	}
	if got := whats(query(t, s, "alice", 0, 100)); got != "4,5,6,7,8,9" {
		t.Errorf("after pruning: %s", got)
	}
	if n, err := s.Prune(context.Background(), base.Add(4*time.Hour)); err != nil || n != 0 {
		t.Errorf("pruning again: %d, %v; want 0", n, err)
	}
}

func testIDsNotReused(t *testing.T, s audit.Store) {
	appendAll(t, s, rec("alice", "exec", "old1", base), rec("alice", "exec", "old2", base))
	old := query(t, s, "alice", 0, 10)
	if _, err := s.Prune(context.Background(), base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	appendAll(t, s, rec("alice", "exec", "new", base.Add(2*time.Hour)))
	got := query(t, s, "alice", 0, 10)
	if len(got) != 1 || got[0].ID <= old[1].ID {
		t.Errorf("after pruning everything, a new record has id %+v; want above %d, so that a reader's cursor still sees it", got, old[1].ID)
	}
}

func testBounds(t *testing.T, s audit.Store) {
	long := strings.Repeat("é", audit.MaxWhat+50)
	appendAll(t, s, api.AuditRecord{Time: base, Tenant: "alice", Kind: "exec", What: long, Detail: strings.Repeat("x", audit.MaxDetail*2)},
		api.AuditRecord{Time: base, Tenant: "alice", Kind: "exec", What: "bad\xff\x00utf8"})
	got := query(t, s, "alice", 0, 10)
	if len(got) != 2 {
		t.Fatalf("records: %+v", got)
	}
	if n := utf8.RuneCountInString(got[0].What); n != audit.MaxWhat || !strings.HasSuffix(got[0].What, "…") {
		t.Errorf("a long what kept %d runes, want %d ending in …", n, audit.MaxWhat)
	}
	if n := utf8.RuneCountInString(got[0].Detail); n != audit.MaxDetail {
		t.Errorf("a long detail kept %d runes, want %d", n, audit.MaxDetail)
	}
	if w := got[1].What; !utf8.ValidString(w) || strings.ContainsRune(w, 0) || !strings.HasPrefix(w, "bad") {
		t.Errorf("invalid UTF-8 and NUL stored as %q", w)
	}
}

func testConcurrent(t *testing.T, s audit.Store) {
	const writers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := s.Append(context.Background(), rec("alice", "exec", fmt.Sprintf("%d-%d", w, i), base)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// A reader pages meanwhile, and must only ever see increasing ids.
	var rd sync.WaitGroup
	rd.Go(func() {
		after := int64(0)
		for range 50 {
			page, err := s.Query(context.Background(), "alice", after, 7)
			if err != nil {
				errs <- err
				return
			}
			for _, r := range page {
				if r.ID <= after {
					errs <- fmt.Errorf("id %d after %d", r.ID, after)
					return
				}
				after = r.ID
			}
		}
	})
	wg.Wait()
	rd.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := s.List(context.Background(), audit.Filter{Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, got)
	seen := map[string]bool{}
	for _, r := range got {
		seen[r.What] = true
	}
	if len(got) != writers*each || len(seen) != writers*each {
		t.Errorf("%d records (%d distinct) after %d appends", len(got), len(seen), writers*each)
	}
}

func testBadArguments(t *testing.T, s audit.Store) {
	ctx := context.Background()
	for _, limit := range []int{0, -1, audit.MaxLimit + 1} {
		if _, err := s.Query(ctx, "alice", 0, limit); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("query with limit %d: %v, want ErrInvalid", limit, err)
		}
	}
	if _, err := s.Query(ctx, "alice", -1, 10); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("query after -1: %v, want ErrInvalid", err)
	}
	if _, err := s.List(ctx, audit.Filter{Limit: -1}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("list with limit -1: %v, want ErrInvalid", err)
	}
	if err := s.Append(ctx, api.AuditRecord{Tenant: "alice"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a record without a kind: %v, want ErrInvalid", err)
	}
}

func testClosed(t *testing.T, s audit.Store) {
	appendAll(t, s, rec("alice", "exec", "x", base))
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("close again: %v", err)
	}
	ctx := context.Background()
	if err := s.Append(ctx, rec("alice", "exec", "y", base)); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("append after close: %v, want ErrClosed", err)
	}
	if _, err := s.Query(ctx, "alice", 0, 10); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("query after close: %v, want ErrClosed", err)
	}
	if _, err := s.Prune(ctx, base); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("prune after close: %v, want ErrClosed", err)
	}
}
