"""With a server killed and no copy of its keys (tests/python/run.sh kills
one of the two before it runs this file): its keys' operations raise
rkv.Unavailable, whose message says a write's outcome is unknown, and the
other server's keys work."""
import pytest

import rkv


def test_a_lost_servers_keys_raise_unavailable_the_others_work(db):
    lost, served = 0, 0
    for i in range(64):
        key = f"lost:{i}".encode()
        try:
            db.put(key, b"v")
        except rkv.Unavailable as e:
            lost += 1
            assert "outcome unknown" in str(e), str(e)
            assert e.code == "UNAVAILABLE"
            with pytest.raises(rkv.Unavailable):
                db.get(key)
            with pytest.raises(rkv.Unavailable, match="outcome unknown"):
                db.put_many([(key, b"v")])
            continue
        served += 1
        assert db.get(key) == b"v"
    # Rendezvous hashing puts about half the keys on each of two groups.
    assert lost > 0 and served > 0, (lost, served)
