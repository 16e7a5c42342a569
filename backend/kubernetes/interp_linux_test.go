package kubernetes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/interp"
)

// TestInterpreter runs the stateful interpreter in a sandbox Pod: in each
// language a second call sees what the first defined, over the exec API
// (the runner's stdin, its relays, signals); a call past its timeout is
// interrupted and the context goes on.
func TestInterpreter(t *testing.T) {
	be := newBackend(t, options())
	inst := backendtest.Create(t, be, pythonImage(t), backendtest.Policy(t, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	calls := map[string][2]string{
		interp.Python:     {"x = 6 * 7", "print(x)"},
		interp.JavaScript: {"globalThis.x = 6 * 7", "console.log(x)"},
		interp.Bash:       {"x=$((6 * 7))", "echo $x"},
	}
	for lang, code := range calls {
		t.Run(lang, func(t *testing.T) {
			c, err := interp.Start(ctx, inst, interp.Options{Language: lang})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			if x, err := c.Run(ctx, code[0], time.Minute, nil); err != nil || x.Error != nil {
				t.Fatalf("%q: %+v %v", code[0], x, err)
			}
			x, err := c.Run(ctx, code[1], time.Minute, nil)
			if err != nil || strings.TrimSpace(x.Stdout) != "42" || x.ExecutionCount != 2 {
				t.Fatalf("%q after %q: %+v %v", code[1], code[0], x, err)
			}
		})
	}
	t.Run("interrupt", func(t *testing.T) {
		c, err := interp.Start(ctx, inst, interp.Options{Language: interp.Python})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Run(ctx, "kept = 'yes'", time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		x, err := c.Run(ctx, "import time\nwhile True: time.sleep(0.1)", 2*time.Second, nil)
		if err != nil || !x.Interrupted || x.Restarted {
			t.Fatalf("a call past its timeout: %+v %v", x, err)
		}
		x, err = c.Run(ctx, "print(kept)", time.Minute, nil)
		if err != nil || strings.TrimSpace(x.Stdout) != "yes" {
			t.Fatalf("after the interrupt: %+v %v", x, err)
		}
	})
}
