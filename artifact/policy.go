package artifact

import (
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Defaults that Normalize puts into the zero fields of an ArtifactPolicy.
const (
	// DefaultMaxFiles caps the entries the walk examines: regular files,
	// folders, links and special files all count, so that a tree of a
	// million empty folders stops the walk early.
	DefaultMaxFiles = 4096
	// DefaultMaxFileBytes matches the default disk cap of a sandbox.
	DefaultMaxFileBytes = 256 << 20
	// DefaultMaxTotalBytes caps the bytes of all files together.
	DefaultMaxTotalBytes = 1 << 30
	// DefaultMaxDepth caps the number of components of a path.
	DefaultMaxDepth = 16
	// DefaultMaxPathLen caps the length of a relative path in bytes.
	DefaultMaxPathLen = 1024
	// DefaultMaxArchiveEntries caps the entries of one zip or Office file,
	// nested archives included.
	DefaultMaxArchiveEntries = 10000
	// DefaultMaxArchiveBytes caps the uncompressed bytes of one archive,
	// nested archives included.
	DefaultMaxArchiveBytes = 1 << 30
	// DefaultMaxArchiveRatio caps the ratio of uncompressed to compressed
	// bytes of one entry. Deflate reaches about 1000:1 on zeros, while
	// spreadsheets and documents stay well under 100:1.
	DefaultMaxArchiveRatio = 100
)

// Values of ArtifactPolicy.ActiveContent.
const (
	ActiveSanitize = "sanitize"
	ActiveReject   = "reject"
)

// DefaultExtensions is the allowlist for data work: tables, text, images,
// documents and notebooks. Legacy Office formats (xls, doc, ppt) and
// macro-enabled ones (xlsm, docm, pptm) are absent on purpose.
var DefaultExtensions = []string{
	"csv", "tsv", "json", "jsonl", "ndjson", "txt", "md", "log",
	"xml", "yaml", "yml", "ipynb",
	"html", "htm", "svg",
	"png", "jpg", "jpeg", "gif", "webp", "pdf",
	"xlsx", "docx", "pptx", "zip", "parquet",
}

// Normalize fills the zero or negative fields of p with the defaults above
// (DefaultMaxFiles, DefaultMaxFileBytes and so on; DefaultExtensions for an
// empty allowlist; "sanitize" for an empty ActiveContent). Extensions are
// lower-cased, stripped of a leading dot, sorted and deduplicated. An
// ActiveContent value other than "sanitize" becomes "reject", the safer
// reading of a value it does not know.
func Normalize(p sandbox.ArtifactPolicy) sandbox.ArtifactPolicy {
	p.MaxFiles = orDefault(p.MaxFiles, DefaultMaxFiles)
	p.MaxFileBytes = orDefault(p.MaxFileBytes, DefaultMaxFileBytes)
	p.MaxTotalBytes = orDefault(p.MaxTotalBytes, DefaultMaxTotalBytes)
	p.MaxDepth = orDefault(p.MaxDepth, DefaultMaxDepth)
	p.MaxPathLen = orDefault(p.MaxPathLen, DefaultMaxPathLen)
	p.MaxArchiveEntries = orDefault(p.MaxArchiveEntries, DefaultMaxArchiveEntries)
	p.MaxArchiveBytes = orDefault(p.MaxArchiveBytes, DefaultMaxArchiveBytes)
	p.MaxArchiveRatio = orDefault(p.MaxArchiveRatio, DefaultMaxArchiveRatio)
	exts := p.Extensions
	if len(exts) == 0 {
		exts = DefaultExtensions
	}
	norm := make([]string, 0, len(exts))
	for _, e := range exts {
		if e = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(e), ".")); e != "" {
			norm = append(norm, e)
		}
	}
	slices.Sort(norm)
	p.Extensions = slices.Compact(norm)
	switch p.ActiveContent {
	case "", ActiveSanitize:
		p.ActiveContent = ActiveSanitize
	default:
		p.ActiveContent = ActiveReject
	}
	return p
}

// orDefault returns d when v is zero or negative.
func orDefault[T int | int64](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}
