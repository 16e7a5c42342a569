"""Direct TCP to public IPv4 addresses, ignoring the proxy: must fail."""
from attacklib import report, try_tcp

targets = [("1.1.1.1", 443), ("8.8.8.8", 53), ("9.9.9.9", 443), ("93.184.215.14", 80)]
opened = [r for r in (try_tcp(h, p) for h, p in targets) if r]
report("direct_tcp_public", not opened, opened or "all %d connections failed" % len(targets))
