# Network attacks with the network off. Env: HOST_PORT is a TCP port the
# test listens on at the host's loopback; ABSTRACT is an abstract unix
# socket name the test bound on the host.
import os, socket

names = [n for _, n in socket.if_nameindex()]
report("only lo exists", names == ["lo"], names)


def unreachable(name, family, addr, kind=socket.SOCK_STREAM):
    try:
        s = socket.socket(family, kind)
    except OSError as ex:
        # where the memory cap cannot count UDP buffers, the filter refuses
        # the socket itself
        report(name, True, "socket refused: " + errno.errorcode.get(ex.errno, str(ex)))
        return
    s.settimeout(3)
    try:
        if kind == socket.SOCK_STREAM:
            s.connect(addr)
            report(name, False, "connected")
        else:
            s.sendto(b"x", addr)
            report(name, False, "sent")
    except OSError as ex:
        report(name, True, errno.errorcode.get(ex.errno, str(ex)))
    finally:
        s.close()


unreachable("tcp to a public ip", socket.AF_INET, ("1.1.1.1", 443))
unreachable("tcp to a public dns server", socket.AF_INET, ("8.8.8.8", 53))
unreachable("tcp to the metadata endpoint", socket.AF_INET, ("169.254.169.254", 80))
unreachable("udp to a public dns server", socket.AF_INET, ("8.8.8.8", 53), socket.SOCK_DGRAM)
unreachable("tcp over ipv6", socket.AF_INET6, ("2606:4700:4700::1111", 443))
unreachable("udp over ipv6", socket.AF_INET6, ("2001:4860:4860::8888", 53), socket.SOCK_DGRAM)
port = int(os.environ.get("HOST_PORT", "0"))
if port:
    # 127.0.0.1 inside is the sandbox's own lo: nothing listens there
    unreachable("tcp to the host's loopback listener", socket.AF_INET, ("127.0.0.1", port))
    unreachable("tcp to the host's loopback listener over ipv6", socket.AF_INET6, ("::1", port))
try:
    socket.getaddrinfo("example.com", 443)
    report("dns lookup", False, "resolved")
except OSError as ex:
    report("dns lookup", True, ex)
for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
             "/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket", "/run/systemd/private",
             "/run/user/0/bus", "/tmp/.X11-unix/X0"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        report("unix socket " + path, False, "connected")
    except OSError as ex:
        report("unix socket " + path, True, errno.errorcode.get(ex.errno, str(ex)))
    finally:
        s.close()
abstract = os.environ.get("ABSTRACT", "")
if abstract:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + abstract)
        report("host abstract unix socket", False, "connected")
    except OSError as ex:
        report("host abstract unix socket", True, errno.errorcode.get(ex.errno, str(ex)))
    finally:
        s.close()
