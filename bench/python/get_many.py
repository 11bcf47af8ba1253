#!/usr/bin/env python3
"""Python batched reads, rkv against Redis, side by side in one run.

rkv's Client.get_many and redis-py pipelining (transaction=False, one GET per
key) read the same keys (and, for reference, redis-py's MGET, one command
for the batch), RECORDS values of VALUE_BYTES, in batches of each
size given. Each store runs ROUNDS timed rounds of SECONDS, the two
interleaved so that both see the same machine; the medians and their ratio
are printed, one line per batch size.

    get_many.py --coordinator=HOST:PORT --token_file=F --redis=HOST:PORT [options]

bench/python/get_many.sh starts a cluster and a redis-server and runs this.
"""
import argparse
import random
import statistics
import sys
import time

import redis

import rkv


def timed_round(get_batch, keys, batch, seconds, rng):
    """Operations per second of get_batch over random batches for `seconds`."""
    ops = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        first = rng.randrange(0, len(keys) - batch + 1)
        values = get_batch(keys[first:first + batch])
        if len(values) != batch or values[0] is None or values[-1] is None:
            sys.exit(f"get_many.py: a batch came back wrong ({len(values)} values)")
        ops += batch
        now = time.perf_counter()
        if now >= deadline:
            return ops / (now - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", required=True, help="rkv's kvcoord, HOST:PORT")
    parser.add_argument("--token_file", default="", help="the cluster token's file")
    parser.add_argument("--redis", required=True, help="redis-server, HOST:PORT")
    parser.add_argument("--records", type=int, default=10000)
    parser.add_argument("--value_bytes", type=int, default=100)
    parser.add_argument("--batches", default="1,16,64,256", help="batch sizes, comma-separated")
    parser.add_argument("--max_outstanding", type=int, default=None,
                        help="rkv.Client's max_outstanding (default: the client's)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per store and batch")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of a round")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.records < max(batches) or args.rounds < 1 or args.seconds <= 0:
        parser.error("need records >= the largest batch, rounds >= 1 and seconds > 0")

    token = open(args.token_file).read().strip() if args.token_file else None
    host, port = args.redis.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    rng = random.Random(1)
    keys = [f"user{i:012d}".encode() for i in range(args.records)]
    value = bytes(rng.randrange(256) for _ in range(args.value_bytes))

    options = {} if args.max_outstanding is None else {"max_outstanding": args.max_outstanding}
    with rkv.Client(args.coordinator, token=token, **options) as db:
        db.put_many((k, value) for k in keys)
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.set(k, value)
        pipe.execute()

        def redis_batch(batch):
            p = r.pipeline(transaction=False)
            for k in batch:
                p.get(k)
            return p.execute()

        stores = {"rkv": db.get_many, "redis": redis_batch, "mget": r.mget}
        print(f"# {args.records} records of {args.value_bytes} B; {args.rounds} rounds of "
              f"{args.seconds:g} s per store and batch, interleaved; medians")
        print(f"{'batch':>6} {'rkv get_many ops/s':>20} {'redis pipeline ops/s':>22} "
              f"{'rkv/redis':>10} {'redis MGET ops/s':>18} {'rkv/MGET':>9}")
        for batch in batches:
            results = {name: [] for name in stores}
            for _ in range(args.rounds):
                for name, get_batch in stores.items():
                    results[name].append(timed_round(get_batch, keys, batch, args.seconds, rng))
            rkv_ops, redis_ops, mget_ops = (statistics.median(results[name]) for name in stores)
            print(f"{batch:>6} {rkv_ops:>20,.0f} {redis_ops:>22,.0f} {rkv_ops / redis_ops:>10.2f} "
                  f"{mget_ops:>18,.0f} {rkv_ops / mget_ops:>9.2f}")


if __name__ == "__main__":
    main()
