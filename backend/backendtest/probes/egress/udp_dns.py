"""DNS lookups and UDP of any kind: must fail (no resolver, no route)."""
import socket
import struct

from attacklib import TIMEOUT, report

problems = []
for name in ("example.com", "dns-probe.invalid-airlock-check.net"):
    try:
        problems.append("resolved %s to %s" % (name, socket.getaddrinfo(name, 443)[0][4]))
    except OSError:
        pass

query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07example\x03com\x00" + struct.pack(">HH", 1, 1)
servers = ["8.8.8.8", "1.1.1.1", "169.254.169.254", "10.0.2.3", "127.0.0.53"]
try:
    with open("/etc/resolv.conf") as f:
        servers += [l.split()[1] for l in f if l.startswith("nameserver") and len(l.split()) > 1]
except OSError:
    pass
for server in servers:
    fam = socket.AF_INET6 if ":" in server else socket.AF_INET
    try:
        s = socket.socket(fam, socket.SOCK_DGRAM)
    except OSError:
        continue  # refused where the memory cap cannot count UDP buffers
    s.settimeout(TIMEOUT / 3)
    try:
        s.sendto(query, (server, 53))
        data, peer = s.recvfrom(512)
        problems.append("UDP answer from %s" % (peer,))
    except OSError:
        pass
    finally:
        s.close()
report("udp_and_dns", not problems, problems or "no lookup and no UDP answer (%d servers tried)" % len(servers))
