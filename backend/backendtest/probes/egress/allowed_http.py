"""An allowed host over plain HTTP through the proxy: must work."""
import os
import urllib.request

from attacklib import report

url = os.environ.get("ATTACK_HTTP_URL")
if not url:
    report("allowed_http", False, "ATTACK_HTTP_URL is not set")
    raise SystemExit(0)
try:
    with urllib.request.urlopen(url, timeout=20) as r:
        body = r.read(200).decode("utf-8", "replace")
        report("allowed_http", r.status == 200, "%d %s" % (r.status, body.strip()))
except OSError as e:
    report("allowed_http", False, str(e))
