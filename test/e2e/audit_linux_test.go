package e2e_test

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// TestAudit: a tenant reads its own audit records through the SDK, page
// by page, and never another tenant's.
func TestAudit(t *testing.T) {
	s := startServer(t, serverConfig{})
	a := s.client(t, keyA, client.Options{})
	b := s.client(t, keyB, client.Options{})
	cx := ctx(t, time.Minute)
	sess, err := a.CreateSession(cx, api.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := a.Exec(cx, sess.ID, sh("true")); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.DeleteSession(cx, sess.ID); err != nil {
		t.Fatal(err)
	}
	var mine []api.AuditRecord
	for r, err := range a.AuditRecords(cx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, r)
	}
	kinds := map[string]int{}
	for _, r := range mine {
		if r.Tenant != "alice" {
			t.Errorf("alice reads a record of %q: %+v", r.Tenant, r)
		}
		if r.Session == sess.ID {
			kinds[r.Kind]++
		}
	}
	if len(kinds) < 2 {
		t.Errorf("alice's records of her session: %v (of %d records), want its creation, execs and end", kinds, len(mine))
	}
	page, err := a.Audit(cx, 0, 2)
	if err != nil || len(page.Records) != 2 || page.Next == 0 {
		t.Errorf("a page of 2: %+v %v", page, err)
	}
	for r, err := range b.AuditRecords(cx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Tenant != "bob" || r.Session == sess.ID {
			t.Errorf("bob reads %+v", r)
		}
	}
}
