"""The known load every client sends: (shard, key, requests). One hot shard (s0, 50 of 80
requests) and one hot key (k-hot, 40 of 80)."""

LOAD = [("s0", "k-hot", 40), ("s0", "k-a", 10), ("s1", "k-b", 10), ("s2", "k-b", 10), ("s3", "k-b", 10)]


def wait_for_go():
    """Tells the test the client is imported and ready, then waits for its `go`."""
    import sys

    print("ready", flush=True)
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(f"expected go, got {line!r}")
