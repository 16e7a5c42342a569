package nsinit

import (
	"encoding/json"
	"errors"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
)

// file carries out one file operation for the supervisor. Data travels
// through the pipe passed with the request, never through the control
// socket. Init does it, not the supervisor, so that what is written is
// charged to the sandbox's cgroup.
func (in *initState) file(reply Message, op *FileOp, files []*os.File) Message {
	if op == nil {
		reply.Error = "file: no operation"
		return reply
	}
	needsPipe := op.Op == FilePut || op.Op == FileGet || op.Op == FileList
	if needsPipe && len(files) != 1 {
		reply.Error = "file: want one data pipe"
		return reply
	}
	var err error
	switch op.Op {
	case FilePut:
		var inf dirfs.Info
		inf, err = in.fs.Put(op.Path, files[0], op.Max)
		reply.Info = &inf
	case FileGet:
		var f *os.File
		var inf dirfs.Info
		f, inf, err = in.fs.Open(op.Path)
		if err == nil {
			reply.Info = &inf
			out, derr := dupFile(files[0])
			if derr != nil {
				f.Close()
				err = derr
				break
			}
			go func() {
				_, _ = io.Copy(out, f)
				f.Close()
				out.Close()
			}()
		}
	case FileList:
		var infos []dirfs.Info
		infos, err = in.fs.List(op.Path)
		if err == nil {
			err = json.NewEncoder(files[0]).Encode(infos)
		}
	case FileStat:
		var inf dirfs.Info
		inf, err = in.fs.Stat(op.Path)
		reply.Info = &inf
	case FileMkdir:
		err = in.fs.Mkdir(op.Path)
	case FileRemove:
		err = in.fs.Remove(op.Path)
	case FileRename:
		err = in.fs.Rename(op.Path, op.To)
	default:
		reply.Error = "file: unknown operation " + op.Op
		return reply
	}
	if err != nil {
		reply.Info = nil
		var fe *dirfs.Error
		if !errors.As(err, &fe) {
			fe = &dirfs.Error{Kind: dirfs.Other, Msg: err.Error()}
		}
		reply.FileError = fe
	}
	return reply
}
