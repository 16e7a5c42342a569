"""Shared helpers of the egress attack scripts (standard library only).

Each script tries one family of attacks from inside a sandbox and prints
one JSON line: {"name": ..., "ok": true/false, "detail": ...}, where ok
means that the attack was stopped as it must be (or, for the allowed_*
scripts, that the allowed request worked).

Environment:
  HTTPS_PROXY / HTTP_PROXY (or lower case)  the egress proxy, http://HOST:PORT
  ATTACK_HTTPS_URL, ATTACK_HTTP_URL         allowed URLs (allowed_* and SNI scripts)
  ATTACK_CAFILE                             CA bundle for ATTACK_HTTPS_URL (optional)
  ATTACK_DENIED_HOST                        a name not on the allowlist (default denied.test)
  ATTACK_HOST_PORTS                         host loopback ports to try directly (optional)
  ATTACK_HOST_ADDRS                         other host addresses to try directly (optional)
"""

import json
import os
import socket
import sys
import urllib.parse

TIMEOUT = 3.0


def report(name, ok, detail):
    print(json.dumps({"name": name, "ok": bool(ok), "detail": detail}))
    sys.stdout.flush()


def proxy_addr():
    """Returns (host, port) of the proxy from the usual variables."""
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        value = os.environ.get(var)
        if value:
            u = urllib.parse.urlsplit(value)
            return u.hostname, u.port
    raise RuntimeError("no proxy variable is set")


def denied_host():
    return os.environ.get("ATTACK_DENIED_HOST", "denied.test")


def try_tcp(host, port, family=socket.AF_UNSPEC):
    """Connects directly, ignoring any proxy. Returns None when it failed
    (as it must) or a string describing the connection that opened."""
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except OSError:
        return None
    for fam, typ, proto, _, addr in infos:
        s = socket.socket(fam, typ, proto)
        s.settimeout(TIMEOUT)
        try:
            s.connect(addr)
            return "connected to %s" % (addr,)
        except OSError:
            pass
        finally:
            s.close()
    return None


def proxy_exchange(request, read=4096):
    """Sends raw bytes to the proxy and returns the first bytes of the answer."""
    host, port = proxy_addr()
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(request)
        try:
            return s.recv(read)
        except OSError as e:
            return ("error: %s" % e).encode()


def status_of(answer):
    """Returns the HTTP status code of a raw answer, or 0."""
    parts = answer.split(b" ", 2)
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return 0


def first_line(answer):
    return answer.split(b"\r\n", 1)[0].decode("latin-1")


def body_line(answer):
    return answer.split(b"\r\n\r\n", 1)[-1].strip().decode("latin-1")[:200]


def connect_tunnel(host, port):
    """Opens a CONNECT tunnel and returns (socket, status line)."""
    phost, pport = proxy_addr()
    s = socket.create_connection((phost, pport), timeout=10)
    target = "%s:%d" % (host, port)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, first_line(head)


def socks_request(cmd, atyp, addr, port):
    """Runs a SOCKS5 exchange and returns the reply code, or -1."""
    host, pport = proxy_addr()
    with socket.create_connection((host, pport), timeout=10) as s:
        s.sendall(b"\x05\x01\x00")
        if s.recv(2) != b"\x05\x00":
            return -1
        s.sendall(bytes([5, cmd, 0, atyp]) + addr + port.to_bytes(2, "big"))
        reply = s.recv(10)
        return reply[1] if len(reply) >= 2 else -1
