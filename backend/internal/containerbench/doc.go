// Package containerbench holds, in its tests, the benchmarks of the
// container backends beside their baselines, measured in one run: docker
// (runc and runsc) against plain `docker run --rm` with the same flags,
// gvisor against `runsc do`, and the memory an idle sandbox of each takes.
//
//	go test -run '^$' -bench . -benchtime 30x ./backend/internal/containerbench
package containerbench
