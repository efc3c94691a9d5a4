"""A one-shot DHCP/TFTP client for the functional tests, run inside a test namespace.

    python dhcp_client.py v4 IFACE MAC [--arch N] [--user-class iPXE] [--vendor-class X]
    python dhcp_client.py v6 IFACE MAC [--duid HEX] [--http-client] [--src fe80::c1]
    python dhcp_client.py tftp SERVER FILE OUTPUT

Prints one JSON object: the answer's options (v4: names and text, v6: code ->
hex), or ``null`` when no answer came within the timeout. It sends one
Discover / Solicit and reads the Offer / Advertise only: no lease is taken.
"""

import argparse
import json
import os
import random
import socket
import struct
import sys


def dhcp4(args):
    from scapy.all import BOOTP, DHCP, IP, UDP, Ether, conf, mac2str, srp1
    conf.verb = 0
    conf.checkIPaddr = False
    options = [("message-type", "discover")]
    if args.vendor_class:
        options.append(("vendor_class_id", args.vendor_class.encode()))
    if args.user_class:
        options.append(("user_class", args.user_class.encode()))
    if args.arch is not None:
        options.append((93, args.arch.to_bytes(2, "big")))
    options += [("param_req_list", [1, 3, 6, 43, 60, 66, 67]), "end"]
    xid = random.randint(1, 2 ** 32 - 1)
    packet = (Ether(src=args.mac, dst="ff:ff:ff:ff:ff:ff")
              / IP(src="0.0.0.0", dst="255.255.255.255") / UDP(sport=68, dport=67)
              / BOOTP(chaddr=mac2str(args.mac), xid=xid, flags=0x8000) / DHCP(options=options))
    answer = srp1(packet, iface=args.iface, timeout=args.timeout)
    if answer is None:
        return None
    bootp = answer[BOOTP]
    out = {"yiaddr": bootp.yiaddr, "siaddr": bootp.siaddr,
           "file": bootp.file.rstrip(b"\0").decode(errors="replace"), "options": {}}
    for option in answer[DHCP].options:
        if isinstance(option, tuple):
            value = option[1]
            if isinstance(value, bytes):
                value = value.rstrip(b"\0").decode(errors="replace")
            out["options"][str(option[0])] = value if isinstance(value, (str, int)) else str(value)
    return out


def _opt6(code, data):
    return struct.pack("!HH", code, len(data)) + data


def dhcp6(args):
    duid = bytes.fromhex(args.duid.replace(":", "")) if args.duid else (
        struct.pack("!HH", 3, 1) + bytes.fromhex(args.mac.replace(":", "")))
    trid = os.urandom(3)
    msg = (b"\x01" + trid + _opt6(1, duid) + _opt6(3, struct.pack("!III", 1, 0, 0))
           + _opt6(6, struct.pack("!HHH", 23, 59, 16)) + _opt6(8, b"\0\0"))
    if args.http_client:
        msg += _opt6(16, struct.pack("!IH", 343, 10) + b"HTTPClient")
    index = socket.if_nametoindex(args.iface)
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.src, 546, 0, index))
        sock.settimeout(args.timeout)
        sock.sendto(msg, ("ff02::1:2", 547, 0, index))
        try:
            while True:
                data, _ = sock.recvfrom(65535)
                if data[1:4] == trid:
                    break
        except socket.timeout:
            return None
    out, i = {"type": data[0], "options": {}}, 4
    while i + 4 <= len(data):
        code, length = struct.unpack("!HH", data[i:i + 4])
        out["options"][str(code)] = data[i + 4:i + 4 + length].hex()
        i += 4 + length
    return out


def tftp(args):
    """Read one file over TFTP (RFC 1350, 512-byte blocks); returns its size."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, \
            open(args.output, "wb") as out:
        sock.settimeout(args.timeout)
        sock.sendto(b"\0\1" + args.file.encode() + b"\0octet\0", (args.server, 69))
        expected, size = 1, 0
        while True:
            data, peer = sock.recvfrom(4 + 65536)
            opcode, block = struct.unpack("!HH", data[:4])
            if opcode == 5:
                return {"error": block, "message": data[4:].rstrip(b"\0").decode()}
            if opcode != 3:
                continue
            if block == expected:
                out.write(data[4:])
                size += len(data) - 4
                expected = (expected + 1) & 0xFFFF
            sock.sendto(struct.pack("!HH", 4, block), peer)
            if len(data) - 4 < 512:
                return {"size": size}


def main(argv=None):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p4 = sub.add_parser("v4")
    p4.add_argument("iface")
    p4.add_argument("mac")
    p4.add_argument("--arch", type=int)
    p4.add_argument("--user-class")
    p4.add_argument("--vendor-class")
    p6 = sub.add_parser("v6")
    p6.add_argument("iface")
    p6.add_argument("mac")
    p6.add_argument("--duid")
    p6.add_argument("--http-client", action="store_true")
    p6.add_argument("--src", default="fe80::c1")
    pt = sub.add_parser("tftp")
    pt.add_argument("server")
    pt.add_argument("file")
    pt.add_argument("output")
    for p in (p4, p6, pt):
        p.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    result = {"v4": dhcp4, "v6": dhcp6, "tftp": tftp}[args.cmd](args)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
