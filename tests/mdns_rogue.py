"""Test driver: a rogue on the LAN announcing palace services over mDNS (only inside a network
namespace a test created: it multicasts).

    python -m tests.mdns_rogue PALACE_ID ADDRESSES MALFORMED

registers one ``_palace._tcp`` service of PALACE_ID whose peer id is a well-formed fingerprint
(of a key nobody holds) with ADDRESSES IPv4 addresses (10.99.x.y: nowhere), and MALFORMED more
whose peer id is not a fingerprint; prints ``registered`` once done and keeps them until stdin
closes. What a daemon that hears it must do: dial a bounded number of addresses and ignore the
malformed records — and keep working.
"""

from __future__ import annotations

import asyncio
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from zeroconf import IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from palace_proto.ids import fingerprint

SERVICE = "_palace._tcp.local."


async def main(palace_id: str, addresses: int, malformed: int) -> None:
    zc = AsyncZeroconf(ip_version=IPVersion.V4Only)
    key = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    infos = [AsyncServiceInfo(SERVICE, f"rogue-many.{SERVICE}", port=7437, server="rogue-many.local.",
                              properties={"palace": palace_id, "peer": fingerprint(key), "v": "2"},
                              parsed_addresses=[f"10.99.{i // 250}.{i % 250 + 1}" for i in range(addresses)])]
    infos += [AsyncServiceInfo(SERVICE, f"rogue-bad-{i}.{SERVICE}", port=7437, server=f"rogue-bad-{i}.local.",
                               properties={"palace": palace_id, "peer": f"not-a-fingerprint-{i}\x1b[31m", "v": "2"},
                               parsed_addresses=[f"10.98.0.{i + 1}"]) for i in range(malformed)]
    tasks = [await zc.async_register_service(info) for info in infos]
    await asyncio.gather(*tasks)
    print("registered", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await zc.async_close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
