"""An allowed host over HTTPS through the proxy: must work."""
import os
import ssl
import urllib.request

from attacklib import report

url = os.environ.get("ATTACK_HTTPS_URL")
if not url:
    report("allowed_https", False, "ATTACK_HTTPS_URL is not set")
    raise SystemExit(0)
ctx = ssl.create_default_context(cafile=os.environ.get("ATTACK_CAFILE") or None)
try:
    with urllib.request.urlopen(url, timeout=20, context=ctx) as r:
        body = r.read(200).decode("utf-8", "replace")
        report("allowed_https", r.status == 200, "%d %s" % (r.status, body.strip()))
except OSError as e:
    report("allowed_https", False, str(e))
