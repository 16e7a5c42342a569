package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
)

// runFile is "file OP PATH [ARG]": one file operation beneath the
// sandbox's folders (see the File* operations).
func runFile(args []string) int {
	if len(args) < 2 {
		return fileFail(&dirfs.Error{Kind: dirfs.Invalid, Msg: "usage: airlock-k8s-agent file OP PATH [ARG]"})
	}
	fs, err := openRoots()
	if err != nil {
		return fileFail(&dirfs.Error{Kind: dirfs.Other, Msg: err.Error()})
	}
	defer fs.Close()
	op, p := args[0], args[1]
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	defer out.Flush()
	var answer any
	switch {
	case op == FilePut && len(args) == 3:
		max, perr := strconv.ParseInt(args[2], 10, 64)
		if perr != nil || max < 0 {
			return fileFail(&dirfs.Error{Kind: dirfs.Invalid, Msg: "put: bad cap " + args[2]})
		}
		answer, err = fs.Put(p, os.Stdin, max)
		// The rest of what the backend sends (it sends at most max+1
		// bytes) is read and dropped: a refused put that left it unread
		// would leave the exec's stdin stream full, and the exec did not
		// end (seen on the test cluster: a put over the input cap hung
		// until the test was killed).
		_, _ = io.Copy(io.Discard, io.LimitReader(os.Stdin, max+1))
	case op == FileGet && len(args) == 2:
		f, info, gerr := fs.Open(p)
		if gerr != nil {
			return fileFail(gerr)
		}
		defer f.Close()
		if err := json.NewEncoder(out).Encode(info); err != nil {
			return 1
		}
		if _, err := io.Copy(out, f); err != nil {
			return 1
		}
		return 0
	case op == FileStat && len(args) == 2:
		answer, err = fs.Stat(p)
	case op == FileList && len(args) == 2:
		answer, err = fs.List(p)
	case op == FileMkdir && len(args) == 2:
		answer, err = struct{}{}, fs.Mkdir(p)
	case op == FileRemove && len(args) == 2:
		answer, err = struct{}{}, fs.Remove(p)
	case op == FileRename && len(args) == 3:
		answer, err = struct{}{}, fs.Rename(p, args[2])
	case op == FileTar && len(args) == 2:
		if err := fs.Tar(p, out); err != nil {
			return fileFail(err)
		}
		return 0
	default:
		return fileFail(&dirfs.Error{Kind: dirfs.Invalid, Msg: fmt.Sprintf("file %q with %d arguments: unknown", op, len(args)-1)})
	}
	if err != nil {
		return fileFail(err)
	}
	if err := json.NewEncoder(out).Encode(answer); err != nil {
		return 1
	}
	return 0
}

// openRoots opens the three folders. None is dirfs's ReadOnly (folders
// 0555): the agent runs as the sandbox's user without the capability to
// write past a mode, and could not fill a folder it made; what keeps the
// code from writing its inputs is the sandbox container's read-only
// mount of them.
func openRoots() (*dirfs.FS, error) {
	var roots []dirfs.Root
	for _, p := range []string{TmpDir, OutputDir, InputDir} {
		d, err := os.Open(p)
		if err != nil {
			for _, o := range roots {
				o.Dir.Close()
			}
			return nil, err
		}
		roots = append(roots, dirfs.Root{Path: p, Dir: d, UID: os.Getuid(), GID: os.Getgid()})
	}
	return dirfs.New(roots...), nil
}

// fileFail writes err as the one JSON line on stderr and returns 1.
func fileFail(err error) int {
	e, ok := err.(*dirfs.Error)
	if !ok {
		e = &dirfs.Error{Kind: dirfs.Other, Msg: err.Error()}
	}
	b, _ := json.Marshal(e)
	fmt.Fprintf(os.Stderr, "%s\n", b)
	return 1
}
