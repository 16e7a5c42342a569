// Command code runs Python code in a session's interpreter: state stays
// between calls, and a figure comes back as a PNG, which it saves.
package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.FromEnv(os.Getenv, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	sess, err := c.CreateSession(ctx, api.CreateSession{Image: os.Getenv("AIRLOCK_IMAGE")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.DeleteSession(context.WithoutCancel(ctx), sess.ID)
	if _, err := c.RunCode(ctx, sess.ID, api.Code{Code: "xs = [1, 4, 9, 16]"}); err != nil {
		log.Fatal(err)
	}
	res, err := c.RunCodeStreaming(ctx, sess.ID, api.Code{Code: `
import matplotlib.pyplot as plt
plt.plot(xs)
plt.show()
sum(xs)`}, func(ev api.CodeEvent) {
		if ev.Type == api.EventStdout || ev.Type == api.EventStderr {
			fmt.Print(ev.Text)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range res.Events {
		switch {
		case ev.Type == api.EventError:
			fmt.Printf("%s: %s\n", ev.Name, ev.Value)
		case ev.Data["image/png"] != "":
			b, err := base64.StdEncoding.DecodeString(ev.Data["image/png"])
			if err != nil {
				log.Fatal(err)
			}
			if err := os.WriteFile("figure.png", b, 0o644); err != nil {
				log.Fatal(err)
			}
			fmt.Printf("saved figure.png, %d bytes\n", len(b))
		case ev.Type == api.EventResult:
			fmt.Printf("result: %s\n", ev.Data["text/plain"])
		}
	}
}
