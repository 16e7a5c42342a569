package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"connectrpc.com/connect"
	fspb "github.com/airlock-sandbox/airlock/e2b/internal/envdpb/filesystem"
	"github.com/airlock-sandbox/airlock/e2b/internal/envdpb/filesystem/filesystemconnect"
	"github.com/airlock-sandbox/airlock/sandbox"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// filesystemService is envd's filesystem service over a session's files.
// WatchDir runs an inotify watcher inside the sandbox (watch.go); the
// polled watchers (CreateWatcher and the rest) are not offered.
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	h *Handler
}

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// sandboxUser is the owner and group airlock reports for every file: the
// sandbox's one user.
const sandboxUser = "user"

// entryOf turns a FileInfo into envd's EntryInfo.
func entryOf(p string, fi sandbox.FileInfo) *fspb.EntryInfo {
	e := &fspb.EntryInfo{Name: path.Base(p), Path: p, Size: fi.Size, Mode: uint32(fi.Mode.Perm()),
		Permissions: fi.Mode.String(), Owner: sandboxUser, Group: sandboxUser, Type: fspb.FileType_FILE_TYPE_FILE}
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = timestamppb.New(fi.ModTime)
	}
	switch {
	case fi.Mode.IsDir():
		e.Type = fspb.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode&fs.ModeSymlink != 0:
		e.Type = fspb.FileType_FILE_TYPE_SYMLINK
		t := fi.Target
		e.SymlinkTarget = &t
	case !fi.Mode.IsRegular():
		e.Type = fspb.FileType_FILE_TYPE_UNSPECIFIED
	}
	return e
}

// prepare finds the request's session, checks its user and resolves p.
func prepare[T any](ctx context.Context, req *connect.Request[T], p string) (sandbox.Files, string, error) {
	s, err := current(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := userOf(req.Header(), ""); err != nil {
		return nil, "", err
	}
	return s.Files(), resolve(p), nil
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	files, p, err := prepare(ctx, req, req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	fi, err := files.Stat(ctx, p)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entryOf(p, fi)}), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	files, p, err := prepare(ctx, req, req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	if _, err := files.Stat(ctx, p); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", p))
	} else if !errors.Is(err, sandbox.ErrNotFound) {
		return nil, rpcError(err)
	}
	if err := files.Mkdir(ctx, p); err != nil {
		return nil, rpcError(err)
	}
	fi, err := files.Stat(ctx, p)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: entryOf(p, fi)}), nil
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	files, from, err := prepare(ctx, req, req.Msg.GetSource())
	if err != nil {
		return nil, rpcError(err)
	}
	to := resolve(req.Msg.GetDestination())
	if err := files.Rename(ctx, from, to); err != nil {
		return nil, rpcError(err)
	}
	fi, err := files.Stat(ctx, to)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entryOf(to, fi)}), nil
}

// maxListed bounds the entries one ListDir answers.
const maxListed = 10000

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	files, p, err := prepare(ctx, req, req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	fi, err := files.Stat(ctx, p)
	if err != nil {
		return nil, rpcError(err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a folder", p))
	}
	out := &fspb.ListDirResponse{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		list, err := files.List(ctx, dir)
		if err != nil {
			return err
		}
		for _, e := range list {
			if len(out.Entries) >= maxListed {
				return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s holds more than %d entries to depth %d", p, maxListed, depth))
			}
			child := path.Join(dir, e.Name)
			out.Entries = append(out.Entries, entryOf(child, e))
			if e.IsDir() && level < depth {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(out), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	files, p, err := prepare(ctx, req, req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	if err := files.Remove(ctx, p); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}
