#!/usr/bin/env python3
"""The partition's image server of the e2e boot network: metal-hammer's kernel and initrd.

metal-stack serves metal-hammer from an image cache in the partition, not from
metalboot; so does this test: ``python image_server.py DIR ADDRESS PORT LOG``
serves the files of DIR over HTTP/1.1 on ADDRESS (IPv6 or IPv4) and appends
one JSON line per request to LOG (time, client address, method, path,
status), from which the e2e tests read when each machine fetched its kernel
and initrd.
"""

import functools
import http.server
import ipaddress
import json
import socket
import sys
import threading
import time


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_lock = threading.Lock()
    log_path = None

    def log_request(self, code="-", size="-"):
        line = {"time": time.time(), "client": self.client_address[0], "method": self.command,
                "path": self.path, "status": int(code) if str(code).isdigit() else code}
        with self.log_lock, open(self.log_path, "a") as f:
            f.write(json.dumps(line) + "\n")

    def log_message(self, *args):
        pass


def main(directory, address, port, log_path):
    Handler.log_path = log_path
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET

    class Server(http.server.ThreadingHTTPServer):
        address_family = family
    server = Server((address, int(port)), functools.partial(Handler, directory=directory))
    print(f"serving {directory} on {address} port {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:5])
