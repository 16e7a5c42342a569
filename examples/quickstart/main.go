// Command quickstart creates a session, runs one command in it and prints
// its Result, then deletes the session.
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
	sess, err := c.CreateSession(ctx, api.CreateSession{TTLSeconds: 300})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DeleteSession(context.WithoutCancel(ctx), sess.ID)
	res, err := c.Exec(ctx, sess.ID, api.Exec{Cmd: []string{"python3", "-c", "print(6*7)"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d, stdout %q, %.1f ms\n", res.ExitCode, res.Stdout, res.DurationMS)
}
