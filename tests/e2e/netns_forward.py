"""Forward 127.0.0.1:<port> of the caller's network namespace to an address in another.

``python netns_forward.py NETNS HOST:PORT [HOST:PORT ...]`` listens on
127.0.0.1 (one free port per target, printed on one line of stdout) in the
namespace it was started in, then enters network namespace NETNS (an ``ip
netns add`` name) and connects each accepted connection to its target there
(``[fd55::1]:8080`` for IPv6). The test process reaches the metalboot-server running in
the boot network's namespace through it without any link between the
namespaces: traffic stays on the host's loopback and inside NETNS.
"""

import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def enter_netns(name):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def serve(listener, host, port):
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection((host, port), timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


def parse_target(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def main():
    netns, targets = sys.argv[1], [parse_target(t) for t in sys.argv[2:]]
    listeners = []
    for _ in targets:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listeners.append(listener)
    # The listening sockets stay in the namespace they were created in; sockets
    # created from now on (the upstream connections) live in NETNS.
    enter_netns(netns)
    threads = [threading.Thread(target=serve, args=(listener, host, port), daemon=True)
               for listener, (host, port) in zip(listeners, targets, strict=True)]
    for t in threads:
        t.start()
    print(" ".join(str(s.getsockname()[1]) for s in listeners), flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
