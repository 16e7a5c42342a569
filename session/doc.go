// Package session runs sandboxes that live across the steps of an agent.
// A Manager holds the sessions of one airlock process: it creates them on
// a backend (from a warm pool when one matches), wires each one's egress
// proxy and artifact filter, ends them at their TTL or idle timeout,
// enforces the caps on sessions in all and per owner, and destroys
// everything on Close. Every surface (the CLI, the HTTP server, the MCP
// server, the agent loop) works through it.
package session
