"""Issue 30's checks on a multi-host network: a standalone master and two workers in
network namespaces, Spark's RPC authenticated and encrypted, a stranger on the same
segment who sniffs every frame and floods the driver's server (tests/netns_bed.py).

One run of tests/netns_job.py (small data: 2^18 features) answers:

* sniff: with our channels encrypted (Spark's setting) the stranger reads no weights
  or gradients from any frame, async or sharded; with them in clear it reads them
  (so the sniffer is able to);
* flood: 40 slow strangers and a flood of garbage connections change nothing of an
  async fit (bit-identical to the quiet one) and are reported;
* bind: no Python process in any namespace listens on a wildcard address; the
  driver's server listens on the driver's address, shards on their executor's.

Skipped, with the reason, where namespaces cannot be made (not root). Bounded: the
job and the attacker stop by themselves; the bed removes every namespace and link.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time

import pytest

from netns_bed import ADDRESSES, NetnsBed, unavailable
from wiretap import plaintext_frames

HERE = os.path.dirname(os.path.abspath(__file__))
REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"netns test bed: {REASON}")


def run_bed(work: str, timeout: float = 420, **job_args) -> dict:
    """Run the job on a fresh bed; the job's results, phases, capture and listeners."""
    secret = secrets.token_hex(16)
    listeners = set()
    with NetnsBed(work) as bed:
        bed.start_spark(secret)
        attacker = bed.popen("attacker", [sys.executable, os.path.join(HERE, "netns_attacker.py"),
                                          "--out", work, "--target", ADDRESSES["master"],
                                          "--seconds", str(timeout)], "attacker.log")
        job = bed.popen("master", [sys.executable, "-X", "faulthandler",
                                   os.path.join(HERE, "netns_job.py"), "--master",
                                   bed.master_url, "--secret", secret, "--out", work,
                                   *[f"--{k}={v}" for k, v in job_args.items()]],
                        "job.log", bed.spark_env("master", secret))
        deadline = time.monotonic() + timeout
        while job.poll() is None and time.monotonic() < deadline:
            for role in ("master", "w1", "w2"):
                listeners.update((role, entry) for entry in bed.listeners(role)
                                 if "python" in entry)
            time.sleep(0.5)
        if job.poll() is None:
            job.send_signal(6)  # faulthandler: every thread's stack into job.log
            time.sleep(5)
        attacker.terminate()
        attacker.wait(60)
        netem = bed.netem
    log = open(os.path.join(work, "job.log")).read()
    assert job.returncode == 0, f"the bed's job failed:\n{log[-6000:]}"
    phases = {}
    for line in open(os.path.join(work, "phases.jsonl")):
        record = json.loads(line)
        if "event" in record:
            phases.setdefault(record["phase"], {})[record["event"]] = record["time"]
    meta = json.load(open(os.path.join(work, "capture.json")))
    data = open(os.path.join(work, "capture.bin"), "rb").read()
    streams = {}  # phase -> the streams of flows that began during it
    for flow in meta["flows"]:
        for phase, window in phases.items():
            if window["start"] <= flow["first"] <= window["end"]:
                streams.setdefault(phase, []).append(
                    data[flow["offset"]: flow["offset"] + flow["size"]])
    return dict(result=json.load(open(os.path.join(work, "result.json"))), streams=streams,
                attack=json.load(open(os.path.join(work, "attack.json"))), meta=meta,
                listeners=sorted(listeners), netem=netem)


@pytest.fixture(scope="module")
def bed_run(tmp_path_factory):
    return run_bed(str(tmp_path_factory.mktemp("netns")))


def _plaintext_bytes(streams) -> int:
    return sum(values.size * 8 for stream in streams for _, values in plaintext_frames(stream))


def test_a_sniffer_on_the_segment_reads_no_weights_when_spark_encrypts(bed_run):
    result, streams = bed_run["result"], bed_run["streams"]
    for kind in ("async", "sharded"):
        sealed, clear = result[f"{kind}-sealed"], result[f"{kind}-clear"]
        assert sealed["channelsEncrypted"] is True and clear["channelsEncrypted"] is False
        # The sniffer saw the frames of both (headers are clear) ...
        assert sum(s.count(b"GSPS") for s in streams[f"{kind}-sealed"]) > 50
        # ... read numbers from every clear fit, and from no encrypted one.
        assert _plaintext_bytes(streams[f"{kind}-clear"]) > 10_000
        assert _plaintext_bytes(streams[f"{kind}-sealed"]) == 0
        # Encryption changed the bytes only.
        assert sealed["objective"] == clear["objective"]
        assert sealed["intercept"] == clear["intercept"]


def test_a_flooding_stranger_changes_nothing_and_is_reported(bed_run):
    result, attack = bed_run["result"], bed_run["attack"]
    quiet, attacked = result["async-sealed"], result["async-attacked"]
    assert attack["slow_connected"] >= 20 and attack["flood_connections"] > 0, attack
    assert attacked["objective"] == quiet["objective"]
    assert attacked["intercept"] == quiet["intercept"]
    assert attacked["coefficient_digest"] == quiet["coefficient_digest"]
    assert attacked["connectionsRefused"] + attacked["framesRejected"] > 0, attacked
    # No stranger held a connection past the whole-handshake deadline (10 s), however
    # slowly it kept sending.
    assert attack["slow_dropped"] == attack["slow_connected"]
    assert max(attack["slow_held_seconds"]) < 12, attack["slow_held_seconds"]


def test_no_server_listens_on_a_wildcard_address(bed_run):
    listeners = bed_run["listeners"]
    assert listeners, "no Python listener was ever seen: the check saw nothing"
    wildcard = [entry for entry in listeners
                if entry[1].startswith(("0.0.0.0:", "*:", "[::]:"))]
    assert not wildcard, wildcard
    # The shards (sharded phases) listened on their executors' own addresses.
    for role in ("w1", "w2"):
        assert any(entry.startswith(ADDRESSES[role] + ":") for r, entry in listeners
                   if r == role), listeners
