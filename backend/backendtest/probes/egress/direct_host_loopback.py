"""Direct TCP to the host's loopback listeners and other host addresses,
ignoring the proxy: must fail. Inside the sandbox, 127.0.0.1 is the
sandbox's own loopback, where only the proxy listens."""
import os

from attacklib import proxy_addr, report, try_tcp

ports = [22, 25, 53, 80, 111, 443, 631, 2375, 2376, 3306, 5432, 6379, 8080, 8443, 9000, 11211, 27017]
ports += [int(p) for p in os.environ.get("ATTACK_HOST_PORTS", "").split(",") if p.strip()]
_, proxy_port = proxy_addr()
addrs = ["127.0.0.1", "::1"] + [a for a in os.environ.get("ATTACK_HOST_ADDRS", "").split(",") if a.strip()]
opened = []
for addr in addrs:
    for port in sorted(set(ports)):
        if addr.startswith("127.") and port == proxy_port:
            continue
        r = try_tcp(addr, port)
        if r:
            opened.append(r)
report("direct_tcp_host_loopback", not opened, opened or "%d addresses x %d ports: all failed" % (len(addrs), len(set(ports))))
