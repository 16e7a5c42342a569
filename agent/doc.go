// Package agent is airlock's agent loop: a task and the files' names,
// sizes and first rows go to a model behind any OpenAI-compatible
// chat-completions endpoint; the model calls the sandbox's tools (package
// tools) in one session; the observations go back; the loop ends when the
// model answers or a limit (steps, wall time, tokens, cost) is reached,
// and the accepted artifacts are collected before the session is
// destroyed.
//
// Skills (folders with a SKILL.md) are put read-only in the sandbox and
// named to the model, which reads them on demand. With Plan, an
// orchestrator splits the task into subtasks, runs each as a sub-agent
// loop with its own budget in the same session, sees only their short
// reports, and composes the answer.
//
// Every request, response, tool call and observation is written to a JSONL
// transcript with its timing and token counts, so that a run can be
// inspected, and replayed (Replay) in a fresh sandbox with the
// observations compared. The endpoint's key is sent only in the
// Authorization header: it never enters the sandbox, and it is removed
// from everything the loop writes.
package agent
