// Command files uploads an input, runs code that writes outputs, lists
// the artifact filter's verdicts and downloads the files that may leave
// into ./out.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/sandbox"
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
	// input/ is read-only to the code
	if _, err := c.WriteFile(ctx, sess.ID, "input/sales.csv", []byte("region,total\nnorth,10\nsouth,=1+1\n")); err != nil {
		log.Fatal(err)
	}
	script := `cp /workspace/input/sales.csv /workspace/output/report.csv; echo '<b>hi</b><script>x()</script>' > /workspace/output/page.html; cp /bin/true /workspace/output/tool`
	if res, err := c.Exec(ctx, sess.ID, api.Exec{Cmd: []string{"sh", "-c", script}}); err != nil || res.ExitCode != 0 {
		log.Fatalf("exec: %+v %v", res, err)
	}
	arts, err := c.Artifacts(ctx, sess.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range arts {
		fmt.Printf("%-12s %-9s %s\n", a.Path, a.Verdict, a.Reason)
		if a.Verdict == sandbox.VerdictRejected {
			continue
		}
		b, got, err := c.ReadFile(ctx, sess.ID, "output/"+a.Path, 0)
		if errors.Is(err, client.ErrRejected) {
			continue // judged again at download, and refused
		}
		if err != nil {
			log.Fatal(err)
		}
		if err := os.MkdirAll("out", 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("out", filepath.Base(a.Path)), b, 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("  downloaded %d bytes (%s)\n", len(b), got.Verdict)
	}
}
