"""TLS through a CONNECT tunnel to an allowed host, but with another server
name in the ClientHello, or none: the handshake must fail. Certificate
checks are off, so only the proxy can stop it."""
import os
import ssl
import urllib.parse

from attacklib import connect_tunnel, denied_host, report

url = os.environ.get("ATTACK_HTTPS_URL")
if not url:
    report("proxy_sni_mismatch", False, "ATTACK_HTTPS_URL is not set")
    raise SystemExit(0)
u = urllib.parse.urlsplit(url)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
results = {}
for label, sni in (("other_name", denied_host()), ("no_name", None)):
    s, status = connect_tunnel(u.hostname, u.port or 443)
    if " 200 " not in status + " ":
        results[label] = "tunnel refused before TLS: " + status
        s.close()
        continue
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
        results[label] = "handshake succeeded with %s" % t.version()
        t.close()
    except (ssl.SSLError, OSError) as e:
        results[label] = "refused: %s" % e
    finally:
        s.close()
report("proxy_sni_mismatch", all(v.startswith("refused") for v in results.values()), results)
