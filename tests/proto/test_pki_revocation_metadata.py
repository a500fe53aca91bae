"""Revocation metadata is validated by explicit checks that hold under ``python -O`` (issue 11,
finding 11): ``Revocation.from_metadata`` used ``assert`` for its shape checks, which ``-O``
removes, so a malformed revocation from a peer escaped as an AttributeError (or was judged on
the wrong grounds) instead of being refused as malformed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Each case is malformed; every one must be refused as "malformed", never escape or pass as
# something else. The signed fields are otherwise well-formed, so a missing check shows.
MALFORMED = {
    "not an object": [],
    "cutoffs a list": {"cutoffs": []},
    "cutoffs a string": {"cutoffs": "ori_a"},
    "negative cutoff": {"cutoffs": {"ori_a": -1}},
    "boolean cutoff": {"cutoffs": {"ori_a": True}},
    "cutoff beyond 64 bits": {"cutoffs": {"ori_a": 2**70}},
    "number as peer id": {"peer_id": 7},
    "missing revoked_at": {"revoked_at": None},
    "key not hex": {"public_key": "zz"},
}

_CHECK = textwrap.dedent("""
    import datetime, json, sys
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from palace_proto.ids import fingerprint
    from palace_proto.pki import Revocation, RevocationError, new_palace

    ca_key, ca_pem, palace_id = new_palace("p", datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC))
    member = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    good = Revocation(palace_id, fingerprint(member), member, (("ori_a", 7),), "2026-11-30T03:00:00Z")
    good = good.signed(ca_key).to_metadata()
    results = {"optimized": not __debug__}
    for name, change in json.loads(sys.stdin.read()).items():
        metadata = change if not isinstance(change, dict) else {**good, **change}
        try:
            Revocation.from_metadata(metadata, ca_pem)
            results[name] = "accepted"
        except RevocationError as exc:
            results[name] = str(exc)
        except Exception as exc:
            results[name] = f"escaped: {type(exc).__name__}: {exc}"
    print(json.dumps(results))
""")


@pytest.mark.parametrize("flags", [["-O"], []], ids=["python -O", "python"])
def test_malformed_revocation_metadata_is_refused_with_and_without_asserts(flags: list[str]) -> None:
    done = subprocess.run([sys.executable, *flags, "-c", _CHECK], input=json.dumps(MALFORMED), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results.pop("optimized") is (flags == ["-O"])
    assert {name: "malformed" in outcome for name, outcome in results.items()} == dict.fromkeys(MALFORMED, True), \
        results
