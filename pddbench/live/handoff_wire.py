"""The handoff microbenchmark's wire: length-prefixed messages over one TCP connection, a JSON
header then raw bytes (KV as a byte buffer, token ids as little-endian int32; never pickle).

The receiver (MD's side, in dc-b) reads each message into a preallocated buffer and answers with
the CLOCK_MONOTONIC time at which its last byte arrived. Both namespaces share the host's
monotonic clock, so the sender gets the one-way delivery time without an ack's return trip.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import time

_LEN = struct.Struct("<I")
_ACK = struct.Struct("<d")


def send_message(sock: socket.socket, header: dict, payload: memoryview | bytes) -> None:
    head = json.dumps({**header, "payload_bytes": len(payload)}).encode()
    sock.sendall(_LEN.pack(len(head)) + head)
    sock.sendall(payload)


def recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed mid-message")
        got += n


def read_ack(sock: socket.socket) -> float:
    buf = bytearray(_ACK.size)
    recv_exact(sock, memoryview(buf))
    return _ACK.unpack(buf)[0]


def serve(host: str, port: int, max_bytes: int) -> None:
    """Serve connections one after another (readiness probes come first) until killed; answer
    each message with its arrival time."""
    buf = memoryview(bytearray(max_bytes))
    with socket.create_server((host, port)) as srv:
        while True:
            conn, _ = srv.accept()
            with conn:
                _serve_connection(conn, buf, max_bytes)


def _serve_connection(conn: socket.socket, buf: memoryview, max_bytes: int) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lenbuf = bytearray(_LEN.size)
    while True:
        try:
            recv_exact(conn, memoryview(lenbuf))
        except ConnectionError:
            return
        head = bytearray(_LEN.unpack(lenbuf)[0])
        recv_exact(conn, memoryview(head))
        n = json.loads(head)["payload_bytes"]
        if n > max_bytes:
            raise SystemExit(f"message of {n} B exceeds the receiver's {max_bytes} B buffer")
        recv_exact(conn, buf[:n])
        conn.sendall(_ACK.pack(time.monotonic()))


BLOCK_TOKENS = 16  # a paged KV pool's block: the KV of N tokens sits in scattered blocks


def measure(host: str, port: int, tokens: int, kv_bytes_per_token: int, trials: int, seed: int) -> list[dict]:
    """Alternate the two handoffs `trials` times each over one warm connection.
    KV: gather the tokens' blocks from a paged pool into one send buffer (the memory copy),
    then ship it. Token ids: ship `tokens` int32 ids. Times are delivery times in ms."""
    import numpy as np

    rng = np.random.default_rng(seed)
    block_bytes = BLOCK_TOKENS * kv_bytes_per_token
    need = -(-tokens // BLOCK_TOKENS)
    pool = rng.integers(0, 256, size=(max(64, 4 * need), block_bytes), dtype=np.uint8)
    kv_bytes_for_tokens = tokens * kv_bytes_per_token
    ids = rng.integers(16, 32000, size=tokens, dtype="<i4")
    rows = []
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for trial in range(trials):
            blocks = rng.choice(len(pool), size=need, replace=False)
            t0 = time.monotonic()
            buf = np.concatenate([pool[b] for b in blocks])[:kv_bytes_for_tokens]
            t1 = time.monotonic()
            send_message(sock, {"kind": "kv", "trial": trial, "tokens": tokens}, memoryview(buf))
            kv_arrived = read_ack(sock)
            head = {"kind": "token_ids", "trial": trial, "tokens": tokens}
            t2 = time.monotonic()
            send_message(sock, head, ids.tobytes())
            ids_arrived = read_ack(sock)
            msg_bytes = _LEN.size + len(json.dumps({**head, "payload_bytes": ids.nbytes}).encode()) + ids.nbytes
            rows.append({"trial": trial, "kv_copy_ms": (t1 - t0) * 1e3, "kv_transfer_ms": (kv_arrived - t1) * 1e3,
                         "kv_ms": (kv_arrived - t0) * 1e3, "kv_bytes": kv_bytes_for_tokens,
                         "token_network_ms": (ids_arrived - t2) * 1e3, "token_bytes": msg_bytes})
            time.sleep(0.01)  # handoffs are spread out, not back to back
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["serve", "measure"])
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-bytes", type=int, default=1 << 26)
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--kv-bytes-per-token", type=int, help="measure: the KV geometry (the caller's scenario states it)")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.role == "serve":
        serve(a.host, a.port, a.max_bytes)
    elif a.kv_bytes_per_token is None:
        p.error("measure needs --kv-bytes-per-token")
    else:
        print(json.dumps(measure(a.host, a.port, a.tokens, a.kv_bytes_per_token, a.trials, a.seed)))


if __name__ == "__main__":
    main()
