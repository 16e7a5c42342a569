package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// captureClientHello returns the first flight of a real crypto/tls client.
func captureClientHello(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		tls.Client(c, cfg).Handshake()
		c.Close()
	}()
	br := bufio.NewReaderSize(s, bufSize)
	hdr := make([]byte, recordHeaderLen)
	if _, err := io.ReadFull(br, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// refragment splits the handshake message of one record into records of
// at most n bytes, as a client may.
func refragment(rec []byte, n int) []byte {
	var out []byte
	for msg := rec[recordHeaderLen:]; len(msg) > 0; {
		k := min(n, len(msg))
		out = append(out, recordHandshake, 3, 1, byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

func peekBytes(b []byte) (string, error) {
	return peekServerName(bufio.NewReaderSize(bytes.NewReader(b), bufSize))
}

func TestPeekServerName(t *testing.T) {
	hello := captureClientHello(t, &tls.Config{ServerName: "api.example.test"})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"one record", hello},
		{"records of 64 bytes", refragment(hello, 64)},
		{"records of 1 byte", refragment(hello, 1)},
	} {
		got, err := peekBytes(tc.b)
		if err != nil || got != "api.example.test" {
			t.Errorf("%s: %q %v", tc.name, got, err)
		}
	}
	br := bufio.NewReaderSize(bytes.NewReader(hello), bufSize)
	if _, err := peekServerName(br); err != nil || br.Buffered() != len(hello) {
		t.Errorf("peek consumed bytes or failed: %d buffered of %d, %v", br.Buffered(), len(hello), err)
	}
	noSNI := captureClientHello(t, &tls.Config{InsecureSkipVerify: true})
	if got, err := peekBytes(noSNI); err != nil || got != "" {
		t.Errorf("no SNI: %q %v", got, err)
	}
}

// errTwoNames stands for the refusal of a server_name list of two names.
var errTwoNames = errors.New("more than one host name")

func TestPeekServerNameRefuses(t *testing.T) {
	hello := captureClientHello(t, &tls.Config{ServerName: "api.example.test"})
	sniAt := bytes.Index(hello, []byte("api.example.test"))
	// Two host names in one server_name list.
	twoNames := bytes.Clone(hello)
	copy(twoNames[sniAt-3:], append(append([]byte{0, 0, 6}, "a.test"...), append([]byte{0, 0, 7}, "bb.test"...)...))
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"plain HTTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), errNotTLS},
		{"SSLv2 hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, errNotTLS},
		{"alert record", []byte{21, 3, 1, 0, 2, 2, 40}, errNotTLS},
		{"empty record", []byte{22, 3, 1, 0, 0}, errNotTLS},
		{"server hello", append([]byte{22, 3, 3, 0, 4}, 2, 0, 0, 0), errNotTLS},
		{"oversized record", []byte{22, 3, 1, 0x48, 0x01}, errNotTLS},
		{"huge message", []byte{22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, sandbox.ErrInvalid},
		{"truncated", hello[:len(hello)-10], io.ErrUnexpectedEOF},
		{"truncated body", append(append([]byte{22, 3, 1, 0, 10}, 1, 0, 0, 6), 3, 3, 1, 2, 3, 4), sandbox.ErrInvalid},
		{"list of two names", twoNames, errTwoNames},
	} {
		_, err := peekBytes(tc.b)
		switch {
		case tc.want == errTwoNames && err != nil && strings.Contains(err.Error(), "more than one host name"):
		case err == nil || !errors.Is(err, tc.want) && !(tc.want == io.ErrUnexpectedEOF && errors.Is(err, io.EOF)):
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
	}
}
