// Command background starts a long-running process, feeds it lines on its
// stdin, then stops it with a signal and prints its Result.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.FromEnv(os.Getenv, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sess, err := c.CreateSession(ctx, api.CreateSession{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DeleteSession(context.WithoutCancel(ctx), sess.ID)
	p, err := c.StartProcess(ctx, sess.ID, api.Exec{Cmd: []string{"python3", "-u", "-c", `
import signal, sys
signal.signal(signal.SIGTERM, lambda *_: (print("stopped"), sys.exit(0)))
for line in sys.stdin:
    print("seen:", line.strip())
`}})
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range []string{"first\n", "second\n"} {
		if err := c.WriteStdin(ctx, sess.ID, p.ID, strings.NewReader(line)); err != nil {
			log.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.SignalProcess(ctx, sess.ID, p.ID, "SIGTERM"); err != nil {
		log.Fatal(err)
	}
	done, err := c.WaitProcess(ctx, sess.ID, p.ID, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if done.Running {
		log.Fatal("the process is still running")
	}
	fmt.Printf("exit %d, stdout %q\n", done.Result.ExitCode, done.Result.Stdout)
}
