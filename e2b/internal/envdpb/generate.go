// Package envdpb holds the protobuf definitions of envd's process and
// filesystem services and the Go code generated from them (messages by
// protoc-gen-go, Connect handlers by protoc-gen-connect-go). The generated
// files are committed; building and testing need no protoc. To regenerate
// after editing a .proto file (protoc, protoc-gen-go and
// protoc-gen-connect-go on PATH):
//
//	go generate ./e2b/internal/envdpb
package envdpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative process/process.proto filesystem/filesystem.proto
