package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines may share: a sandbox's or a
// server's writers and the test that reads what they wrote.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
