"""Requests that try to talk the proxy round: a Host header that differs
from the target, user info, percent-encoding, a second Host header, an
https URL without CONNECT, plain HTTP inside a tunnel. None may reach a
server; every one gets a 4xx answer."""
import os
import urllib.parse

from attacklib import connect_tunnel, denied_host, first_line, proxy_exchange, report, status_of

allowed = urllib.parse.urlsplit(os.environ.get("ATTACK_HTTP_URL", "http://allowed.invalid/")).hostname
denied = denied_host()
requests = [
    "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (allowed, denied),
    "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nHost: %s\r\n\r\n" % (allowed, allowed, denied),
    "GET http://%s@%s/ HTTP/1.1\r\n\r\n" % (allowed, denied),
    "GET http://%s%%2f@%s/ HTTP/1.1\r\n\r\n" % (allowed, denied),
    "GET http://%s%%00.%s/ HTTP/1.1\r\n\r\n" % (allowed, denied),
    "GET https://%s/ HTTP/1.1\r\n\r\n" % denied,
    "GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % denied,
    "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (allowed, denied),
    "CONNECT %s:22 HTTP/1.1\r\n\r\n" % allowed,
]
passed = []
for req in requests:
    code = status_of(proxy_exchange(req.encode()))
    if not 400 <= code < 500:
        passed.append("%r -> %d" % (req.split("\r\n")[0], code))
s, status = connect_tunnel(allowed, 80)
if " 200 " in status + " ":
    s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % allowed).encode())
    answer = s.recv(4096)
    if status_of(answer) != 403:
        passed.append("plain HTTP in a tunnel -> %s" % first_line(answer))
s.close()
report("proxy_smuggling", not passed, passed or "%d tricks refused" % (len(requests) + 1))
