#!/usr/bin/env python3
"""A TLS front of metalboot-server for the e2e boot network (HTTPS boot).

``python tls_front.py CERT KEY LISTEN_ADDRESS PORT UPSTREAM_ADDRESS UPSTREAM_PORT LOG``
accepts TLS connections and pipes each one, decrypted, to the upstream HTTP
server (metalboot-server), as a TLS-terminating load balancer would; one JSON
line per connection goes to LOG (time, client address, TLS version), from which
the e2e tests read that the firmware came over HTTPS. HTTP keep-alive passes
through unchanged (OVMF sends HEAD and GET on one connection).
"""

import json
import socket
import ssl
import sys
import threading
import time


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn, client, context, upstream, log_path, log_lock):
    try:
        tls = context.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError) as exc:
        line = {"time": time.time(), "client": client[0], "error": str(exc)}
        with log_lock, open(log_path, "a") as f:
            f.write(json.dumps(line) + "\n")
        conn.close()
        return
    with log_lock, open(log_path, "a") as f:
        f.write(json.dumps({"time": time.time(), "client": client[0],
                            "tls": tls.version(), "cipher": tls.cipher()[0]}) + "\n")
    up = socket.create_connection(upstream)
    threading.Thread(target=pipe, args=(up, tls), daemon=True).start()
    pipe(tls, up)


def main(cert, key, address, port, up_address, up_port, log_path):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    # OVMF 2022.11's TLS client and Python's default server list share no
    # cipher suite ("no shared cipher"): add TLS 1.2 RSA key exchange suites
    # (OVMF then negotiates AES128-GCM-SHA256).
    context.set_ciphers("ECDHE+AESGCM:DHE+AESGCM:AES128-GCM-SHA256:AES256-GCM-SHA384:"
                        "AES128-SHA256:AES256-SHA256")
    listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, int(port)))
    listener.listen(64)
    print(f"TLS front on {address} port {port}", flush=True)
    log_lock = threading.Lock()
    while True:
        conn, client = listener.accept()
        threading.Thread(target=serve, args=(conn, client, context, (up_address, int(up_port)),
                                             log_path, log_lock), daemon=True).start()


if __name__ == "__main__":
    main(*sys.argv[1:8])
