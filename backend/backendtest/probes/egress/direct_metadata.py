"""Direct TCP to cloud metadata endpoints, ignoring the proxy: must fail."""
from attacklib import report, try_tcp

targets = [("169.254.169.254", 80), ("169.254.170.2", 80), ("fd00:ec2::254", 80), ("100.100.100.200", 80)]
opened = [r for r in (try_tcp(h, p) for h, p in targets) if r]
report("direct_tcp_metadata", not opened, opened or "all %d connections failed" % len(targets))
