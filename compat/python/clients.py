#!/usr/bin/python3
"""Drives pacerd with redis-py (Debian's python3-redis), as a bidder would.

Usage: clients.py <pacerd socket>. Prints each check; exits 1 if any failed.
compat/compat_test.go runs it against a real daemon.
"""
import sys

import redis

sock = sys.argv[1]
failures = []


def check(what, ok, got):
    print(("ok   " if ok else "FAIL ") + what + ": " + repr(got))
    if not ok:
        failures.append(what)


def decision(v):
    return v in (1, 0, -1)


def balance(v):
    # RESP2: a flat list; RESP3: a dict.
    d = v if isinstance(v, dict) else dict(zip(v[0::2], v[1::2]))
    return d.get("state") == "active" and all(k in d for k in ("tokens", "reserve", "pace"))


protocols = [2]
major = int(redis.__version__.split(".")[0])
if major >= 5:  # RESP3 arrived in redis-py 5.0
    protocols.append(3)
else:
    print("redis-py %s has no RESP3 (added in 5.0): RESP2 only" % redis.__version__)

for proto in protocols:
    kw = {"protocol": proto} if major >= 5 else {}
    r = redis.Redis(unix_socket_path=sock, decode_responses=True, client_name="compat-py", **kw)
    p = "redis-py %s RESP%d: " % (redis.__version__, proto)

    check(p + "PING", r.ping() is True, True)
    v = r.execute_command("SPEND", "demo", 1000)
    check(p + "SPEND", decision(v), v)
    v = r.execute_command("SPEND", "demo", 1000, "auction-1")
    check(p + "SPEND with auction id", decision(v), v)
    try:
        r.execute_command("SPEND", "nosuch", 1)
        check(p + "SPEND of an unknown campaign raises", False, "no error")
    except redis.ResponseError as e:
        check(p + "SPEND of an unknown campaign raises", 'unknown campaign "nosuch"' in str(e), str(e))
    v = r.execute_command("BALANCE", "demo")
    check(p + "BALANCE", balance(v), v)
    v = r.execute_command("REFUND", "demo", 1000, "auction-1")
    check(p + "REFUND", v == 1, v)
    info = r.info()
    check(p + "info() parses", "connected_clients" in info and "total_commands_processed" in info, sorted(info)[:5])
    check(p + "client_getname", r.client_getname() == "compat-py", r.client_getname())
    check(p + "echo", r.echo("hi") == "hi", r.echo("hi"))

    for tx in (True, False):
        what = p + ("pipeline() (MULTI/EXEC)" if tx else "pipeline(transaction=False)")
        pipe = r.pipeline(transaction=tx)
        pipe.echo("first")
        pipe.execute_command("SPEND", "demo", 1000, "auction-2")
        pipe.execute_command("BALANCE", "demo")
        pipe.execute_command("REFUND", "demo", 1000, "auction-2")
        pipe.echo("last")
        res = pipe.execute()
        ok = (len(res) == 5 and res[0] == "first" and decision(res[1]) and balance(res[2])
              and res[3] == 1 and res[4] == "last")
        check(what, ok, res)

        # A refused command takes its own slot; the others still run.
        pipe = r.pipeline(transaction=tx)
        pipe.execute_command("SPEND", "nosuch", 1)
        pipe.echo("after")
        res = pipe.execute(raise_on_error=False)
        ok = len(res) == 2 and isinstance(res[0], redis.ResponseError) and res[1] == "after"
        check(what + " with an error inside", ok, res)

    # Many bidder threads share one client (a connection pool).
    import threading
    results = []

    def bid():
        for _ in range(50):
            results.append(r.execute_command("SPEND", "demo", 1))

    threads = [threading.Thread(target=bid) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(p + "8 threads x 50 SPENDs on a pool", len(results) == 400 and all(decision(v) for v in results),
          "%d replies" % len(results))
    r.close()

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
