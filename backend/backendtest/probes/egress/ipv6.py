"""IPv6 directly, ignoring the proxy, and the interfaces: only lo exists,
and no IPv6 destination outside it answers."""
import socket

from attacklib import TIMEOUT, report, try_tcp

problems = []
names = sorted(n for _, n in socket.if_nameindex())
if names != ["lo"]:
    problems.append("interfaces %s, want only lo" % names)
for host, port in (("2606:4700:4700::1111", 443), ("2001:4860:4860::8888", 443), ("fe80::1%lo", 80), ("64:ff9b::808:808", 443), ("::ffff:8.8.8.8", 443)):
    r = try_tcp(host, port)
    if r:
        problems.append(r)
try:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
except OSError:
    s = None  # refused where the memory cap cannot count UDP buffers
if s is not None:
    s.settimeout(TIMEOUT / 3)
    try:
        s.sendto(b"x", ("2001:4860:4860::8888", 53))
        s.recvfrom(64)
        problems.append("UDP over IPv6 answered")
    except OSError:
        pass
    finally:
        s.close()
report("ipv6_and_interfaces", not problems, problems or "only lo; IPv6 unreachable")
