// Package examples holds small programs that use the Go SDK (package
// client) against airlock serve, one per common flow: quickstart (a
// session, a command, its Result), files (inputs up, artifacts down),
// stream (output as it happens), background (a process fed through its
// stdin and stopped with a signal) and code (stateful code calls). Each
// reads the server from AIRLOCK_URL and the key from AIRLOCK_API_KEY:
//
//	airlock serve &
//	AIRLOCK_URL=http://127.0.0.1:8080 go run ./examples/quickstart
package examples
