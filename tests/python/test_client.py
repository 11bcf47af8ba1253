"""The Python client against a live cluster (tests/python/run.sh)."""
import gc
import re
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import rkv


def unique(prefix):
    return f"{prefix}:{uuid.uuid4().hex}".encode()


def test_put_then_get_returns_the_bytes_put(db):
    key = unique("k")
    db.put(key, b"value\x00with\xffbytes")
    assert db.get(key) == b"value\x00with\xffbytes"
    db.put(key, b"second")
    assert db.get(key) == b"second"


def test_a_miss_is_none_and_false(db):
    key = unique("absent")
    assert db.get(key) is None
    assert db.get_view(key) is None
    assert db.delete(key) is False


def test_insert_only_when_absent_and_delete_says_what_it_did(db):
    key = unique("ins")
    assert db.insert(key, b"first") is True
    assert db.insert(key, b"second") is False
    assert db.get(key) == b"first"
    assert db.delete(key) is True
    assert db.get(key) is None
    assert db.delete(key) is False


def test_str_is_utf8_and_any_buffer_is_taken(db):
    key = "ключ-" + uuid.uuid4().hex
    db.put(key, "значение")
    assert db.get(key.encode()) == "значение".encode()
    for value in (bytearray(b"from a bytearray"), memoryview(b"xxfrom a viewxx")[2:-2]):
        db.put(key, value)
        assert db.get(key) == bytes(value)


def test_a_large_value_goes_in_from_a_view_and_comes_back_as_one(db):
    key = unique("large")
    backing = bytearray(range(256)) * 4096 + bytearray(b"tail")
    view = memoryview(backing)[4:4 + (1 << 20)]  # 1 MiB, the most a value holds.
    db.put(key, view)
    out = db.get_view(key)
    assert isinstance(out, memoryview) and out.readonly
    assert out.nbytes == 1 << 20 and out == view
    assert db.get(key) == bytes(view)


def test_bad_input_raises_clear_errors(db):
    with pytest.raises(rkv.InvalidArgument, match="key of 0 bytes") as e:
        db.put(b"", b"v")
    assert isinstance(e.value, ValueError) and e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(rkv.InvalidArgument, match="values are at most 1048576 bytes"):
        db.put(unique("big"), bytes((1 << 20) + 1))
    with pytest.raises(rkv.InvalidArgument):
        db.get(b"k" * 1025)
    with pytest.raises(TypeError, match="bytes-like objects or str, not int"):
        db.get(7)
    with pytest.raises(BufferError):
        db.put(unique("strided"), memoryview(b"abcdef")[::2])
    with pytest.raises(ValueError, match="pairs"):
        db.put_many([(b"a", b"b", b"c")])


def test_get_many_returns_values_in_order_with_none_for_misses(db):
    keys = [unique("many") for _ in range(500)]
    db.put_many({k: k[::-1] * 3 for k in keys})
    absent = unique("absent")
    out = db.get_many(keys[:250] + [absent] + keys[250:])
    assert out[250] is None
    assert out[:250] + out[251:] == [k[::-1] * 3 for k in keys]
    assert db.get_many([]) == []


def test_put_many_takes_pairs_and_applies_one_keys_writes_in_order(db):
    key = unique("order")
    db.put_many([(key, str(i)) for i in range(50)])
    assert db.get(key) == b"49"
    db.put_many(iter([(key, b"from an iterator")]))
    assert db.get(key) == b"from an iterator"


def test_a_batch_larger_than_the_window_counts_each_operation_once(db):
    # 1,000 writes and reads: more than the 4 x 64 a batch hands the client
    # at once, so the batch goes out in pieces.
    keys = [unique("batch") for _ in range(1000)]
    before = db.stats()
    db.put_many({k: k * 2 for k in keys})
    assert db.get_many(keys) == [k * 2 for k in keys]
    after = db.stats()
    for kind in ("get", "put"):
        assert after[kind]["outcomes"]["ok"] - before[kind]["outcomes"]["ok"] == 1000, kind


def test_one_key_is_not_taken_for_a_batch_of_them(db):
    with pytest.raises(TypeError, match="iterable of keys"):
        db.get_many("abc")
    with pytest.raises(TypeError, match="iterable of keys"):
        db.get_many(b"abc")
    with pytest.raises(TypeError, match="pairs"):
        db.put_many(["ab", "cd"])
    with pytest.raises(TypeError, match="pairs"):
        db.put_many(b"ab")


def test_stats_count_each_kind(db):
    key = unique("stats")
    before = db.stats()
    db.put(key, b"1")
    db.insert(key, b"2")
    db.get(key)
    db.delete(key)
    db.get(key)
    db.delete(key)
    after = db.stats()
    for kind, ops in (("get", 2), ("put", 1), ("insert", 1), ("delete", 2)):
        assert after[kind]["ops"] == before[kind]["ops"] + ops, kind
        assert after[kind]["round_trips"] > before[kind]["round_trips"], kind

    def grew(kind, outcome):
        return after[kind]["outcomes"][outcome] - before[kind]["outcomes"][outcome]

    assert (grew("put", "ok"), grew("insert", "already_exists")) == (1, 1)
    assert (grew("get", "ok"), grew("get", "not_found")) == (1, 1)
    assert (grew("delete", "ok"), grew("delete", "not_found")) == (1, 1)
    for kind, ops in (("get", 2), ("put", 1), ("insert", 1), ("delete", 2)):
        buckets = after[kind]["latency_buckets"]
        assert len(buckets) == 24 and buckets[0][0] == 1e-6 and buckets[-1][0] == float("inf")
        counted = sum(n for _, n in buckets) - sum(n for _, n in before[kind]["latency_buckets"])
        assert counted == ops, kind
        assert after[kind]["latency_sum_seconds"] > before[kind]["latency_sum_seconds"]


def test_threads_may_share_one_client(db):
    errors = []

    def work(n):
        try:
            for i in range(200):
                key = f"shared:{n}:{i}".encode()
                db.put(key, key * 2)
                assert db.get(key) == key * 2
        except Exception as e:  # Reported below, with the thread's number.
            errors.append((n, e))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_the_gil_is_released_while_a_call_waits(cluster):
    # One thread runs a long get_many on its own client while this one does
    # single gets on another. The interpreter is told not to take the GIL
    # from a thread that holds it (a switch interval of 100 s), so a get of
    # this thread could return while the get_many runs only if get_many
    # released the GIL.
    coordinator, token = cluster
    with rkv.Client(coordinator, token=token, fabric="soft") as a, \
            rkv.Client(coordinator, token=token, fabric="soft") as b:
        keys = [unique("gil") for _ in range(5000)]
        a.put_many({k: b"x" * 100 for k in keys})
        b.put(b"gil:probe", b"p")
        span = {}

        def long_call():
            span["start"] = time.monotonic()
            a.get_many(keys * 4)
            span["end"] = time.monotonic()

        interval = sys.getswitchinterval()
        sys.setswitchinterval(100)
        try:
            t = threading.Thread(target=long_call)
            t.start()
            returned = []
            while t.is_alive():
                assert b.get(b"gil:probe") == b"p"
                returned.append(time.monotonic())
            t.join()
        finally:
            sys.setswitchinterval(interval)
        during = [r for r in returned if span["start"] < r < span["end"]]
        assert len(during) >= 3, (len(during), len(returned), span["end"] - span["start"])


def test_a_closed_client_refuses_calls(cluster):
    coordinator, token = cluster
    client = rkv.Client(coordinator, token=token, fabric="soft")
    with client as c:
        c.put(unique("c"), b"v")
    assert client.closed and "closed" in repr(client)
    client.close()  # Again: nothing.
    with pytest.raises(ValueError, match="closed"):
        client.get(b"k")
    # One dropped unclosed closes itself (without holding the GIL).
    dropped = rkv.Client(coordinator, token=token, fabric="soft")
    dropped.put(unique("dropped"), b"v")
    del dropped
    gc.collect()


def test_the_token_may_come_from_a_file(cluster, tmp_path):
    coordinator, token = cluster
    path = tmp_path / "token"
    path.write_text(token + "\n")
    with rkv.Client(coordinator, token_file=str(path), fabric="soft") as c:
        c.put(b"from:file", b"ok")
        assert c.get(b"from:file") == b"ok"
    with pytest.raises(ValueError, match="not both"):
        rkv.Client(coordinator, token=token, token_file=str(path))
    with pytest.raises(FileNotFoundError):
        rkv.Client(coordinator, token_file=str(tmp_path / "absent"))


def test_a_wrong_token_is_refused(cluster):
    coordinator, _ = cluster
    with pytest.raises(rkv.PermissionDenied, match="token"):
        rkv.Client(coordinator, token="not-the-token", fabric="soft")


def test_a_coordinator_nobody_runs_is_an_error(cluster):
    with pytest.raises(rkv.Error):
        rkv.Client("127.0.0.1:1", fabric="soft")


def test_the_readmes_example_prints_what_it_says(cluster, tmp_path, capsys):
    coordinator, token = cluster
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    token_file = tmp_path / "token"
    token_file.write_text(token)
    # The README's cluster is scripts/cluster.sh's at its default place.
    assert "127.0.0.1:7400,127.0.0.1:7401" in example and "/tmp/rkv-cluster/token" in example
    example = example.replace("127.0.0.1:7400,127.0.0.1:7401", coordinator)
    example = example.replace("/tmp/rkv-cluster/token", str(token_file))
    client = rkv.Client(coordinator, token=token, fabric="soft")
    with client:
        client.delete(b"user:2")
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    promised = [line.split("# ", 1)[1] for line in example.splitlines() if "print(" in line]
    assert printed == promised
