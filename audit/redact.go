package audit

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
)

// redacted stands for a secret in what is shown.
const redacted = "xxxxx"

// urlScheme returns the scheme of where when it names a store by URL
// (scheme://...) rather than by a file path.
func urlScheme(where string) (string, bool) {
	scheme, _, ok := strings.Cut(where, "://")
	if !ok || strings.ContainsRune(scheme, '/') {
		return "", false
	}
	return scheme, true
}

// Redact returns where as it may be shown in messages and logs: a URL
// with its password masked, in its user information and in any parameter
// whose name holds "password" (postgres://u:xxxxx@db/audit?sslpassword=xxxxx).
// A URL that does not parse is shown by its scheme alone, since where its
// password ends cannot be told; a file path comes back as it is.
func Redact(where string) string {
	scheme, ok := urlScheme(where)
	if !ok {
		return where
	}
	u, err := url.Parse(where)
	_, rest, _ := strings.Cut(where, "://")
	if err != nil || strings.ContainsRune(rest[authorityEnd(rest):], '@') {
		// An '@' past the authority is the end of a user information that
		// a '/', '?' or '#' in its password cut short: the password's
		// pieces would show in the host, path or query.
		return scheme + "://(a URL that does not parse as one, not shown)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	parts := strings.Split(u.RawQuery, "&")
	for i, p := range parts {
		if k, v, ok := strings.Cut(p, "="); ok && v != "" && secretKey(k) {
			parts[i] = k + "=" + redacted
		}
	}
	u.RawQuery = strings.Join(parts, "&")
	return u.String()
}

// authorityEnd is where the authority of a URL's rest (what follows
// "scheme://") ends for net/url: at the first '/', '?' or '#'.
func authorityEnd(rest string) int {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return i
	}
	return len(rest)
}

// secretKey reports whether a URL parameter's name, escaped or not, names
// a password.
func secretKey(k string) bool {
	if dk, err := url.QueryUnescape(k); err == nil {
		k = dk
	}
	return strings.Contains(strings.ToLower(k), "password")
}

// urlSecrets returns what in a URL may be a password, longest first, for
// masking in error text: the user information's password as net/url and
// as libpq read it (they split a malformed URL differently), and the
// values of password parameters, each escaped and unescaped.
func urlSecrets(where string) []string {
	_, rest, ok := strings.Cut(where, "://")
	if !ok {
		return nil
	}
	var found []string
	add := func(s string) {
		for _, v := range []string{s, unescape(s, url.PathUnescape), unescape(s, url.QueryUnescape)} {
			if v != "" && !slices.Contains(found, v) {
				found = append(found, v)
			}
		}
	}
	userPassword := func(userinfo string) {
		if _, pw, ok := strings.Cut(userinfo, ":"); ok {
			add(pw)
		}
	}
	// net/url: the authority ends at the first '/', '?' or '#', and the
	// user information at its last '@'.
	auth := rest[:authorityEnd(rest)]
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		userPassword(auth[:i])
	}
	// libpq and pgx: the user information ends at the first '@' before
	// any '/'.
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		userPassword(rest[:i])
	}
	// A password holding an unescaped '/', '?' or '#' strands its '@'
	// further on: mask up to the last one.
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		userPassword(rest[:i])
	}
	if _, q, ok := strings.Cut(rest, "?"); ok {
		for p := range strings.SplitSeq(q, "&") {
			if k, v, ok := strings.Cut(p, "="); ok && secretKey(k) {
				add(v)
			}
		}
	}
	slices.SortFunc(found, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return found
}

// unescape returns s unescaped by f, or "" when it does not unescape.
func unescape(s string, f func(string) (string, error)) string {
	u, err := f(s)
	if err != nil {
		return ""
	}
	return u
}

// scrubbed is an error whose text has secrets masked; errors.Is and
// errors.As still see the error it wraps.
type scrubbed struct {
	err     error
	secrets []string // longest first
}

func (e scrubbed) Error() string {
	msg := e.err.Error()
	for _, x := range e.secrets {
		msg = strings.ReplaceAll(msg, x, redacted)
	}
	return msg
}

func (e scrubbed) Unwrap() error { return e.err }
