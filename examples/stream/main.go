// Command stream runs a command that prints as it goes and shows its
// output as it happens, once with callbacks and once with the iterator.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
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
	req := api.Exec{Cmd: []string{"sh", "-c", "for i in 1 2 3; do echo step $i; sleep 0.3; done; echo done >&2"}}
	start := time.Now()
	res, err := c.ExecStreaming(ctx, sess.ID, req, client.Output{
		Stdout: func(s string) { fmt.Printf("[%4d ms] out: %s", time.Since(start).Milliseconds(), s) },
		Stderr: func(s string) { fmt.Printf("[%4d ms] err: %s", time.Since(start).Milliseconds(), s) },
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d\n", res.ExitCode)
	st, err := c.ExecStream(ctx, sess.ID, req)
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range st.All() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("event %s %q\n", ev.Type, ev.Data)
	}
}
