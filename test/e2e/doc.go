// Package e2e holds the end-to-end tests of airlock serve: they build the
// airlock binary, start it as a real server on a free loopback port with a
// keys file of two tenants, and drive it with the Go SDK (package client)
// and with plain HTTP, on real native sandboxes; the load test and the
// `airlock run` client mode live here too. AIRLOCK_BIN names a binary to
// use instead of building ./cmd/airlock.
package e2e
