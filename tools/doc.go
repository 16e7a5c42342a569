// Package tools holds the sandbox's tools as a model sees them: run_code,
// run_command, write_file, read_file, list_files and list_artifacts, with
// their JSON schemas, descriptions that say what the sandbox has and what
// it refuses, and observations kept short (the head and tail of long
// output with the count of bytes left out, the last frames of a
// traceback). The agent loop (package agent) and the MCP server (package
// mcp) offer the same tools through a Kit.
//
// The tools reach a sandbox through the small Sandbox interface. Local
// serves it from a session of this process's session Manager.
package tools
