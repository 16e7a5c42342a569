package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// errRefused means that a request was refused and answered already.
var errRefused = errors.New("refused")

// errHeadTooLarge means a request head did not fit the read buffer.
var errHeadTooLarge = errors.New("request head too large")

// hopHeaders are the hop-by-hop headers that a proxy must not forward.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// httpRefusal is the whole answer to a refused HTTP request: a status,
// and the reason on one line of plain text.
func httpRefusal(code int, reason string) []byte {
	body := "airlock egress: " + strings.NewReplacer("\r", " ", "\n", " ").Replace(reason) + "\n"
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Airlock-Egress: denied\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// request is one request read from the client, with the Host header as the
// client sent it (http.ReadRequest drops it for absolute-form targets).
type request struct {
	*http.Request
	hostHeader []string
}

// upstream is the server connection of a kept-alive HTTP client.
type upstream struct {
	host  Host
	port  int
	conn  *meteredConn
	br    *bufio.Reader
	event int
}

// serveHTTP serves absolute-URI requests until the client or a server
// closes, or hands the connection over to a CONNECT tunnel.
func (s *session) serveHTTP(ctx context.Context) {
	var up *upstream
	defer func() { s.closeUpstream(up) }()
	for wait := handshakeTimeout; ; wait = idleTimeout {
		s.readWithin(wait)
		req, err := readRequest(s.br)
		if err != nil {
			s.refuseBadRequest(ctx, err)
			return
		}
		if req.Method == http.MethodConnect {
			s.closeUpstream(up)
			up = nil
			s.serveConnect(ctx, req)
			return
		}
		s.conn.SetReadDeadline(s.deadline)
		if !s.forward(ctx, req, &up) {
			return
		}
	}
}

// refuseBadRequest answers a request that could not be read, unless the
// client simply went away.
func (s *session) refuseBadRequest(ctx context.Context, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isTimeout(err) {
		return
	}
	code := http.StatusBadRequest
	if errors.Is(err, errHeadTooLarge) {
		code = http.StatusRequestHeaderFieldsTooLarge
	}
	why := "malformed request: " + err.Error()
	s.record(ctx, "", 0, false, why)
	s.conn.Write(httpRefusal(code, why))
}

// readRequest reads one request. The head is first peeked to find the
// Host header as sent, then parsed for real by http.ReadRequest.
func readRequest(br *bufio.Reader) (*request, error) {
	head, err := peekHead(br)
	if err != nil {
		return nil, err
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, err
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	return &request{Request: req, hostHeader: hdr.Values("Host")}, nil
}

// peekHead returns the request head (up to and including the empty line)
// without consuming it.
func peekHead(br *bufio.Reader) ([]byte, error) {
	for n := 1; ; {
		b, err := br.Peek(n)
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errHeadTooLarge
		}
		if err != nil {
			return nil, err
		}
		b, _ = br.Peek(br.Buffered())
		if end := headEnd(b); end > 0 {
			return b[:end], nil
		}
		n = len(b) + 1
	}
}

// headEnd finds the end of the first empty line, accepting CRLF and LF
// line ends as textproto does, or returns -1.
func headEnd(b []byte) int {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		rest := b[i+1:]
		switch {
		case bytes.HasPrefix(rest, []byte("\n")):
			return i + 2
		case bytes.HasPrefix(rest, []byte("\r\n")):
			return i + 3
		}
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return -1
		}
		i += 1 + j
	}
	return -1
}

// serveConnect handles a CONNECT request.
func (s *session) serveConnect(ctx context.Context, req *request) {
	h, port, err := ParseAuthority(req.RequestURI, 0)
	if err == nil {
		err = checkHostHeader(req.hostHeader, h, port)
	}
	if err != nil {
		s.record(ctx, req.RequestURI, 0, false, err.Error())
		s.conn.Write(httpRefusal(http.StatusForbidden, err.Error()))
		return
	}
	s.tunnel(ctx, h, port, tunnelProto{
		refuse: func(why string) { s.conn.Write(httpRefusal(http.StatusForbidden, why)) },
		accept: func() error {
			_, err := s.conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
			return err
		},
	})
}

// checkHostHeader requires the Host header, when there is one, to name
// the target. (http.ReadRequest has already refused a repeated one.)
func checkHostHeader(values []string, h Host, port int) error {
	if len(values) == 0 {
		return nil
	}
	hh, hp, err := ParseAuthority(values[0], port)
	if err != nil {
		return fmt.Errorf("Host header: %w", err)
	}
	if hh != h || hp != port {
		return fmt.Errorf("Host header %q does not name the request target %s: %w", cleanHost(values[0]), authority(h, port), sandbox.ErrInvalid)
	}
	return nil
}

// parseTarget reads an absolute-form http:// request target. It works on
// the raw text, since net/url would decode percent-escapes in the host.
func parseTarget(raw string) (Host, int, error) {
	if len(raw) < 7 || !strings.EqualFold(raw[:7], "http://") {
		return Host{}, 0, fmt.Errorf("request target %q is not an absolute http:// URL (use CONNECT for https): %w", cleanHost(raw), sandbox.ErrInvalid)
	}
	rest := raw[7:]
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return ParseAuthority(rest, 80)
}

// authority writes host:port, bracketing IPv6 addresses.
func authority(h Host, port int) string {
	host := h.String()
	if h.Addr.Is6() {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(port)
}

// forward sends one plain HTTP request upstream and its response back. It
// reports whether the client connection may carry another request.
func (s *session) forward(ctx context.Context, req *request, upp **upstream) bool {
	h, port, err := parseTarget(req.RequestURI)
	if err == nil {
		err = checkHostHeader(req.hostHeader, h, port)
	}
	if err != nil {
		s.record(ctx, req.RequestURI, 0, false, err.Error())
		s.conn.Write(httpRefusal(http.StatusForbidden, err.Error()))
		return false
	}
	if up := *upp; up == nil || up.host != h || up.port != port || up.stale(s.deadline) {
		s.closeUpstream(up)
		*upp = nil
		if *upp, err = s.openUpstream(ctx, h, port); err != nil {
			return false
		}
	}
	return s.exchange(ctx, req.Request, *upp)
}

// openUpstream decides a new destination and connects to it. A refusal is
// recorded and answered here; the error only says that it happened.
func (s *session) openUpstream(ctx context.Context, h Host, port int) (*upstream, error) {
	host := h.String()
	v := s.grant(ctx, h, port)
	if !v.allowed {
		s.conn.Write(httpRefusal(http.StatusForbidden, v.reason))
		return nil, errRefused
	}
	c, err := s.p.dialAny(ctx, v.addrs, port)
	if err == nil && !s.p.track(c) {
		err = net.ErrClosed
	}
	if err != nil {
		s.p.meter.release()
		why := v.reason + "; connecting failed: " + err.Error()
		s.record(ctx, host, port, true, why)
		s.conn.Write(httpRefusal(http.StatusBadGateway, why))
		return nil, err
	}
	c.SetDeadline(s.deadline)
	mc := &meteredConn{Conn: c, m: &s.p.meter}
	return &upstream{host: h, port: port, conn: mc, br: bufio.NewReaderSize(mc, bufSize), event: s.record(ctx, host, port, true, v.reason)}, nil
}

// stale reports whether the server has closed a kept-alive connection
// (or sent something unasked) since the last response, by peeking with a
// deadline that has already passed. The read deadline then goes back to
// the connection's lifetime cap.
func (up *upstream) stale(lifetime time.Time) bool {
	if up.br.Buffered() > 0 {
		return true
	}
	up.conn.SetReadDeadline(time.Now())
	_, err := up.br.Peek(1)
	up.conn.SetReadDeadline(lifetime)
	return !isTimeout(err)
}

// closeUpstream closes a server connection and books its traffic.
func (s *session) closeUpstream(up *upstream) {
	if up == nil {
		return
	}
	s.p.forget(up.conn.Conn, false)
	s.p.meter.release()
	s.p.events.addBytes(up.event, up.conn.sent.Load(), up.conn.got.Load())
}

// exchange relays one request and its response. It reports whether both
// connections may carry another request.
func (s *session) exchange(ctx context.Context, r *http.Request, up *upstream) bool {
	closeAfter := r.Close
	if prepareRequest(r, up) {
		if _, err := s.conn.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
			return false
		}
	}
	bw := bufio.NewWriter(up.conn)
	err := r.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	var resp *http.Response
	if err == nil {
		resp, err = s.finalResponse(up.br, r)
	}
	if err != nil {
		s.exchangeFailed(ctx, up, err, true)
		return false
	}
	removeHopHeaders(resp.Header)
	closeAfter = closeAfter || resp.Close || resp.ContentLength < 0 && !slices.Contains(resp.TransferEncoding, "chunked")
	resp.Close = closeAfter
	if err = s.writeResponse(resp, up); err != nil {
		s.exchangeFailed(ctx, up, err, false)
		return false
	}
	return !closeAfter
}

// writeResponse sends a response to the client. A body of known length
// is copied straight from the server connection to the client connection
// (by splice(2) where the kernel can) after the bytes already buffered;
// other bodies go through net/http's writer.
func (s *session) writeResponse(resp *http.Response, up *upstream) error {
	cw := bufio.NewWriter(s.conn)
	if resp.Request.Method == http.MethodHead || resp.ContentLength <= 0 || len(resp.TransferEncoding) > 0 {
		defer resp.Body.Close()
		resp.Body = flushBeforeWait{ReadCloser: resp.Body, src: up.br, dst: cw}
		if err := resp.Write(cw); err != nil {
			return err
		}
		return cw.Flush()
	}
	// resp.Body is left unread and unclosed: its bytes are copied below.
	resp.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	if resp.Close {
		resp.Header.Set("Connection", "close")
	}
	fmt.Fprintf(cw, "HTTP/%d.%d %s\r\n", resp.ProtoMajor, resp.ProtoMinor, resp.Status)
	resp.Header.Write(cw)
	cw.WriteString("\r\n")
	head := min(int64(up.br.Buffered()), resp.ContentLength)
	b, _ := up.br.Peek(int(head))
	cw.Write(b)
	up.br.Discard(int(head))
	if err := cw.Flush(); err != nil {
		return err
	}
	return s.p.meter.pump(s.conn, up.conn.Conn, in, &up.conn.got, resp.ContentLength-head)
}

// exchangeFailed records a cap that cut an exchange short and, when the
// client has had no response yet, answers with the reason.
func (s *session) exchangeFailed(ctx context.Context, up *upstream, err error, answer bool) {
	if up.conn.hit != nil {
		// net/http may hide the cause (as a body read error, say).
		err = up.conn.hit
	}
	s.capEvent(ctx, up.host.String(), up.port, err)
	if answer {
		s.conn.Write(httpRefusal(http.StatusBadGateway, s.lifetimeError(err).Error()))
	}
}

// prepareRequest turns a client's request into the one sent upstream: in
// origin form, with the checked host, without hop-by-hop headers or a
// default User-Agent. It reports whether the client expects a 100
// Continue before it sends the body; the proxy answers that itself.
func prepareRequest(r *http.Request, up *upstream) bool {
	expect := strings.EqualFold(r.Header.Get("Expect"), "100-continue")
	r.Header.Del("Expect")
	removeHopHeaders(r.Header)
	r.Host = up.host.String()
	if up.host.Addr.Is6() || up.port != 80 {
		r.Host = authority(up.host, up.port)
	}
	if _, ok := r.Header["User-Agent"]; !ok {
		r.Header["User-Agent"] = []string{}
	}
	r.Close = false
	return expect
}

// removeHopHeaders deletes the hop-by-hop headers, including those that
// the Connection header names.
func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// finalResponse reads the response to r, passing informational (1xx)
// responses on to the client. Protocol switches are not relayed.
func (s *session) finalResponse(br *bufio.Reader, r *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, r)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, fmt.Errorf("the server switched protocols, which the proxy does not relay: %w", sandbox.ErrUnsupported)
		case resp.StatusCode >= 200:
			return resp, nil
		}
		if err := resp.Write(s.conn); err != nil {
			return nil, err
		}
	}
}

// flushBeforeWait is a response body that flushes what was written to the
// client before it waits for more from the server, so that a trickling
// response (server-sent events, progress output) is not held back.
type flushBeforeWait struct {
	io.ReadCloser
	src *bufio.Reader
	dst *bufio.Writer
}

// Read flushes the client's buffer if the next read would wait for the
// server, then reads.
func (f flushBeforeWait) Read(b []byte) (int, error) {
	if f.src.Buffered() == 0 && f.dst.Buffered() > 0 {
		if err := f.dst.Flush(); err != nil {
			return 0, err
		}
	}
	return f.ReadCloser.Read(b)
}

// isTimeout reports whether err is a deadline that expired.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
