"""SOCKS5 on the proxy port: a name not on the list, UDP ASSOCIATE and
BIND must be refused."""
from attacklib import denied_host, report, socks_request

name = denied_host().encode()
results = {
    "not_listed": socks_request(1, 3, bytes([len(name)]) + name, 443),
    "udp_associate": socks_request(3, 1, bytes(4), 0),
    "bind": socks_request(2, 3, bytes([len(name)]) + name, 443),
}
report("proxy_socks5", all(code != 0 for code in results.values()), results)
