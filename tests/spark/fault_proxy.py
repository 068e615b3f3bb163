"""A CQL-aware TCP proxy in front of a store that makes chosen writes' outcomes unknown to
the client: the Python twin of tests/integration/common/fault_proxy.rs, for the tests that
drive the `countersink` binary from Python.

A real node has no fault injection, yet an unknown outcome is what exact totals exist for.
From the client's side an unknown write is a request that got no answer: the store may have
applied it (the answer was lost) or not (the request was). The proxy does exactly that to
the next writes into a chosen table, and nothing else: it reads the CQL v4 frames going
through (the `scylla` driver speaks v4, uncompressed unless told otherwise), learns which
prepared statement id is which query from PREPARE and its RESULT, and for a matching
EXECUTE or BATCH of an UPDATE or INSERT either forwards it and drops the store's answer
(ANSWER: applied) or drops the request itself (REQUEST: not applied). The client's request
timeout then makes the write unknown. What it did to each request is kept in `log()`.

With one node and no `system.peers` rows the driver stays on the address it was given, so
every connection goes through the proxy.
"""

import socket
import struct
import threading

HEADER = 9
OP_RESULT, OP_PREPARE, OP_EXECUTE, OP_BATCH = 0x08, 0x09, 0x0A, 0x0D
RESULT_PREPARED = 0x0004
FLAG_TRACING, FLAG_CUSTOM_PAYLOAD, FLAG_WARNING = 0x02, 0x04, 0x08

# What to drop of a matching write.
ANSWER = "answer"  # forward the request, drop the store's answer: applied, unknown to the client
REQUEST = "request"  # drop the request: not applied, unknown to the client


def _read_exact(sock, n):
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _short(body, at):
    if at + 2 > len(body):
        return None
    return struct.unpack(">H", body[at:at + 2])[0]


def _short_bytes(body, at):
    """`[short bytes]` (or `[string]`) at `at`: the bytes and the offset after them."""
    n = _short(body, at)
    if n is None or at + 2 + n > len(body):
        return None
    return body[at + 2:at + 2 + n], at + 2 + n


def _long_string(body, at):
    if at + 4 > len(body):
        return None
    n = struct.unpack(">I", body[at:at + 4])[0]
    if at + 4 + n > len(body):
        return None
    return body[at + 4:at + 4 + n].decode(errors="replace")


class _Frame:
    def __init__(self, header, body):
        self.header, self.body = header, body

    @staticmethod
    def read(sock):
        header = _read_exact(sock, HEADER)
        if header is None:
            return None
        body = _read_exact(sock, struct.unpack(">I", header[5:9])[0])
        return None if body is None else _Frame(header, body)

    def stream(self):
        return struct.unpack(">h", self.header[2:4])[0]

    def opcode(self):
        return self.header[4]

    def message(self):
        """The body after the tracing id, custom payload and warnings the flags announce (a
        node adds warnings to some answers); empty when it cannot be read."""
        flags, body, at = self.header[1], self.body, 0
        if flags & FLAG_TRACING and self.header[0] & 0x80:
            at += 16
        if flags & FLAG_CUSTOM_PAYLOAD:
            n = _short(body, at)
            if n is None:
                return b""
            at += 2
            for _ in range(n):
                key = _short_bytes(body, at)
                if key is None or key[1] + 4 > len(body):
                    return b""
                at = key[1]
                at += 4 + max(0, struct.unpack(">i", body[at:at + 4])[0])
        if flags & FLAG_WARNING:
            n = _short(body, at)
            if n is None:
                return b""
            at += 2
            for _ in range(n):
                warning = _short_bytes(body, at)
                if warning is None:
                    return b""
                at = warning[1]
        return body[at:]


class FaultProxy:
    """Listens on a free loopback port and forwards every connection to `backend`
    (`(host, port)`) until `close()`."""

    def __init__(self, backend):
        self._backend = backend
        self._lock = threading.Lock()
        self._rules = []  # [table, swallow, left], first match first
        self._prepared = {}  # prepared statement id -> query
        self._log = []  # {"query", "swallow", "answer_opcode"}
        self._sockets = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.addr = "127.0.0.1:%d" % self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def swallow(self, table, swallow, count=1):
        """Makes the next `count` writes into `table` (`keyspace.table`, as the query names
        it) unknown, dropping `swallow` (ANSWER or REQUEST)."""
        with self._lock:
            self._rules.append([table, swallow, count])

    def clear(self):
        with self._lock:
            self._rules.clear()

    def log(self):
        """Every write made unknown so far: dicts of query, swallow, answer_opcode (with
        ANSWER, the opcode of the store's dropped answer once it came: RESULT or ERROR)."""
        with self._lock:
            return [dict(entry) for entry in self._log]

    def close(self):
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._backend)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            prepares, dropped = {}, {}  # stream -> query of a PREPARE; stream -> log entry
            threading.Thread(target=self._requests, args=(client, server, prepares, dropped), daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client, prepares, dropped), daemon=True).start()

    def _write_query(self, frame):
        """The query a write frame runs (a BATCH: its first statement's), if it is one."""
        message = frame.message()
        if frame.opcode() == OP_EXECUTE:
            found = _short_bytes(message, 0)
            return self._prepared.get(found[0]) if found else None
        if frame.opcode() == OP_BATCH and len(message) > 3:
            # type, statement count, then the first statement: kind 0 (query) or 1 (id).
            if message[3] == 0:
                return _long_string(message, 4)
            if message[3] == 1:
                found = _short_bytes(message, 4)
                return self._prepared.get(found[0]) if found else None
        return None

    def _requests(self, client, server, prepares, dropped):
        """Client to store: forwards each frame but the requests a rule drops."""
        try:
            while (frame := _Frame.read(client)) is not None:
                if frame.opcode() == OP_PREPARE:
                    query = _long_string(frame.message(), 0)
                    if query is not None:
                        with self._lock:
                            prepares[frame.stream()] = query
                chosen = None
                with self._lock:
                    query = self._write_query(frame)
                    if query and query.lstrip().upper().startswith(("UPDATE", "INSERT")):
                        for rule in self._rules:
                            if rule[2] > 0 and rule[0] in query:
                                rule[2] -= 1
                                chosen = rule[1]
                                self._log.append({"query": query, "swallow": chosen, "answer_opcode": None})
                                if chosen == ANSWER:
                                    dropped[frame.stream()] = len(self._log) - 1
                                break
                if chosen == REQUEST:
                    continue
                server.sendall(frame.header + frame.body)
        except OSError:
            pass

    def _answers(self, server, client, prepares, dropped):
        """Store to client: forwards each frame but the answers a rule drops; learns
        prepared ids."""
        try:
            while (frame := _Frame.read(server)) is not None:
                stream = frame.stream()
                with self._lock:
                    query = prepares.pop(stream, None)
                    message = frame.message()
                    if (query is not None and frame.opcode() == OP_RESULT
                            and message[:4] == struct.pack(">i", RESULT_PREPARED)):
                        found = _short_bytes(message, 4)
                        if found:
                            self._prepared[found[0]] = query
                    entry = dropped.pop(stream, None)
                    if entry is not None:
                        self._log[entry]["answer_opcode"] = frame.opcode()
                if entry is not None:
                    continue
                client.sendall(frame.header + frame.body)
        except OSError:
            pass
