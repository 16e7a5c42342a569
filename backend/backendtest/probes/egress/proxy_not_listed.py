"""A host that is not on the allowlist, over CONNECT, plain HTTP and the
standard library's proxy support: must be refused with 403."""
import urllib.error
import urllib.request

from attacklib import body_line, denied_host, proxy_exchange, report, status_of

host = denied_host()
results = {}
answer = proxy_exchange(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
results["connect"] = (status_of(answer), body_line(answer))
answer = proxy_exchange(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host)).encode())
results["plain_http"] = (status_of(answer), body_line(answer))
try:
    urllib.request.urlopen("http://%s/" % host, timeout=10)
    results["urllib"] = (200, "fetched")
except urllib.error.HTTPError as e:
    results["urllib"] = (e.code, e.read().decode("latin-1").strip()[:200])
except OSError as e:
    results["urllib"] = (0, str(e))
report("proxy_host_not_listed", all(code == 403 for code, _ in results.values()), results)
