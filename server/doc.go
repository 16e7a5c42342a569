// Package server is airlock's HTTP API, v1, over a session Manager: the
// routes of sessions, files, processes, code and contexts, artifacts and
// the audit log, with API keys per tenant, per-key rate limits, body caps,
// timeouts for slow clients, JSON errors, and NDJSON streams that deliver
// output as it happens. The wire types are package api's.
package server
