package client

import (
	"context"
	"iter"
	"net/url"
	"strconv"

	"github.com/airlock-sandbox/airlock/api"
)

// Audit reads one page of the tenant's own audit records, oldest first:
// those after the record id after (0: from the start), at most limit
// (0: the server's default, 100). The page's Next is the after of the
// next page, 0 on the last.
func (c *Client) Audit(ctx context.Context, after int64, limit int) (api.AuditList, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.AuditList
	err := c.get(ctx, "/v1/audit", q, &out)
	return out, err
}

// AuditRecords iterates over the tenant's audit records after the record
// id after, page by page; an error ends the iteration as its last pair.
func (c *Client) AuditRecords(ctx context.Context, after int64) iter.Seq2[api.AuditRecord, error] {
	return func(yield func(api.AuditRecord, error) bool) {
		for {
			page, err := c.Audit(ctx, after, 0)
			if err != nil {
				yield(api.AuditRecord{}, err)
				return
			}
			for _, r := range page.Records {
				if !yield(r, nil) {
					return
				}
			}
			if page.Next == 0 || page.Next <= after {
				return
			}
			after = page.Next
		}
	}
}
