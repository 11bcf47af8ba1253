"""rkv: a key-value store whose data path is one-sided RDMA.

    import rkv
    with rkv.Client("127.0.0.1:7400", token_file="/tmp/rkv-cluster/token") as db:
        db.put(b"user:1", b"alice")
        print(db.get(b"user:1"))          # b'alice'; None when absent
        print(db.get_many([b"user:1", b"user:2"]))  # [b'alice', None]

Keys and values are bytes-like objects (bytes, bytearray, memoryview, a
NumPy array: read in place, not copied into a bytes object first) or str
(sent as UTF-8); what comes back is bytes. A miss is None (get) or False
(delete, insert), as in redis-py; a failure raises rkv.Error or one of its
subclasses. rkv.Unavailable means a write's outcome is unknown.

Threads: every call releases the GIL while it waits. A Client may be
shared by threads (their calls run one at a time) or opened one per
thread (they run in parallel, each with its own connections).
"""
from rkv._rkv import (  # noqa: F401
    Error,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    Timeout,
    Unavailable,
    _Client,
)

__all__ = [
    "Client",
    "Error",
    "InvalidArgument",
    "PermissionDenied",
    "ResourceExhausted",
    "Timeout",
    "Unavailable",
]


class Client:
    """A client of one rkv cluster.

    coordinator: "host:port" of a kvcoord, or several comma-separated (the
        client goes on while one answers).
    token: the cluster's token; None for a cluster without one.
    token_file: or a file holding it (kvcoord's --token_file; leading and
        trailing whitespace is not part of the token).
    fabric: "auto" (RDMA when a device exists, else the soft fabric),
        "verbs" or "soft". rdma_device: the verbs device (empty: the first).
    max_outstanding: operations in flight at once per server (the rest wait
        for a place); get_many/put_many hand the client 4 times as many at
        a time.
    cache_entries: key -> slot entries cached (56 bytes each; 0: none).

    Opening connects to the coordinator and fetches the cluster map; servers
    are connected on first use. Use it as a context manager, or call close().
    """

    def __init__(self, coordinator, token=None, *, token_file=None, fabric="auto",
                 rdma_device="", max_outstanding=64, cache_entries=1 << 17):
        if token_file is not None:
            if token is not None:
                raise ValueError("rkv.Client: give token or token_file, not both")
            with open(token_file) as f:
                token = f.read().strip()
        self._client = _Client(coordinator, token, fabric, rdma_device,
                               max_outstanding, cache_entries)

    def get(self, key):
        """The value of `key` as bytes, or None when it is absent."""
        return self._client.get(key)

    def get_view(self, key):
        """Like get, but a read-only memoryview over the value the library
        read (no copy into a bytes object: for large values), or None."""
        return self._client.get_view(key)

    def put(self, key, value):
        """Sets `key` to `value`, inserting or overwriting."""
        self._client.put(key, value)

    def insert(self, key, value):
        """Sets `key` only if absent: True if inserted, False if present."""
        return self._client.insert(key, value)

    def delete(self, key):
        """Deletes `key`: True if it was present, False if absent."""
        return self._client.delete(key)

    def get_many(self, keys):
        """The values of `keys`, in order (None for each absent one). They
        are in flight together (up to max_outstanding per server), their
        reads posted under one doorbell per server. Raises the first
        failure."""
        return self._client.get_many(keys)

    def put_many(self, items):
        """Sets many keys at once: a mapping, or an iterable of (key, value)
        pairs, in flight together like get_many. Writes of one key apply in
        the order given. Once all have finished, raises the first failure
        (the others took effect)."""
        self._client.put_many(items)

    def stats(self):
        """This client's counters so far, by type ("get", "put", "insert",
        "delete"): what its operations cost (ops, round_trips, requests,
        bytes, retries: ops count each try of a retried one), how they ended
        (outcomes: ok, not_found, already_exists, unavailable, failed), and
        how long they took from the call to the result: latency_buckets,
        (upper bound in seconds, count) pairs, not cumulative, the last
        bound inf; latency_sum_seconds."""
        return self._client.stats()

    def close(self):
        """Closes the client's connections. Idempotent; a closed client's
        calls raise ValueError."""
        self._client.close()

    @property
    def closed(self):
        return self._client.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<rkv.Client{' (closed)' if self.closed else ''}>"
