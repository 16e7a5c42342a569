// Package e2b is airlock's E2B-compatible surface: the control plane the
// official E2B SDKs call to create, find, list, extend and kill sandboxes,
// and, for each sandbox, the envd agent they talk to (the process and
// filesystem services over the Connect protocol, file transfers over
// plain HTTP) and the code interpreter. Every sandbox is a session of the
// same session.Manager that serves airlock's own API, so the policy,
// limits, egress allowlist, artifact filter, tenants and audit events are
// the same; a sandbox made here is a session there and the reverse.
//
// One listener serves it all: a request that carries E2b-Sandbox-Id (and
// E2b-Sandbox-Port: 49983 for envd, 49999 for the code interpreter), or a
// Host named PORT-ID.DOMAIN, goes to that sandbox; anything else is the
// control plane. A sandbox id alone opens nothing: every sandbox request
// must carry the access token the control plane handed out for that
// sandbox (X-Access-Token or E2B-Traffic-Access-Token, as the SDKs send
// them), a signature made with it, or an API key of the sandbox's tenant.
//
// The package maps errors to the statuses and codes the SDKs expect; it
// leaves authentication of API keys and rate limits to its caller
// (package server), through Options.
package e2b
