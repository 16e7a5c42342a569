"""IP literals in many notations through the proxy, over CONNECT, plain
HTTP and SOCKS5: all must be refused."""
from attacklib import proxy_exchange, report, socks_request, status_of

literals = [
    "127.0.0.1", "127.1", "127.0.1", "0x7f.1", "0x7f000001", "2130706433", "0177.0.0.1", "017700000001",
    "127.000.000.001", "0", "0.0.0.0", "169.254.169.254", "0xa9fea9fe", "2852039166", "169.254.43518",
    "10.0.0.1", "192.168.1.1", "100.64.0.1", "8.8.8.8", "127.0.0.1.", "[::1]", "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "[fe80::1%25lo]", "[::127.0.0.1]",
    "[fd00:ec2::254]", "[2606:4700:4700::1111]", "%31%32%37.0.0.1",
]
passed = []
for lit in literals:
    for req in ("CONNECT %s:443 HTTP/1.1\r\n\r\n" % lit, "GET http://%s/ HTTP/1.1\r\n\r\n" % lit):
        code = status_of(proxy_exchange(req.encode()))
        if code not in (400, 403):
            passed.append("%s -> %d" % (req.split("\r\n")[0], code))
for atyp, addr in ((1, bytes([127, 0, 0, 1])), (1, bytes([169, 254, 169, 254])), (4, bytes(15) + b"\x01"),
                   (3, b"\x0a2130706433"), (3, b"\x090x7f.0.0.1"), (3, b"\x09127.0.0.1")):
    code = socks_request(1, atyp, addr, 443)
    if code == 0:
        passed.append("socks5 atyp %d %r -> granted" % (atyp, addr))
report("proxy_ip_literals", not passed, passed or "%d literals refused over CONNECT, HTTP and SOCKS5" % len(literals))
