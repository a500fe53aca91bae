"""The peer network: every TCP connection to other daemons of the palace.

It listens on the configured address and dials static peers (``palacectl peers add``), addresses
remembered from earlier connections, peers mDNS reports and the addresses daemons gossip — past
nine members, only those its partial view keeps (``overlay``); runs mutual TLS (``tls.py``, on ``tls_stream.TlsStream``) and
hands each authenticated stream to a ``PeerLink`` (link.py: the IO shell around the replication
rules, which live in ``palace_proto.link``); keeps **one link per peer pair**; refuses revoked peers and drops
their links the moment a revocation is observed; answers enrolments while invites are pending;
gossips which watchers are connected where and what each daemon says about itself (reports),
both signed, relayed newest-wins through one sender per link; and counts which peers confirmed
holding an event (``append --replicated K``).

The layers, each module importing only those above it:

- ``clock``: the UTC stamp written in records and rows; ``link``: one link, a shell over its
  protocol machine (imports nothing of the package);
- ``registry``: the peers' records, one live link per peer, and the change hook the parts below
  subscribe to instead of being called;
- ``links``: one authenticated connection run as a link, however it ends;
- ``dialing``: dial targets (static, remembered, mDNS, invite), back-off, the mDNS bridge;
  ``admission``: the listener's side (bounds on strangers, TLS as server, enrolment hand-off);
- ``gossip``: which ready links gossip goes to; ``receipts``: what peers confirmed holding;
- ``presence``: watchers across the palace; ``views``: what status, peers, doctor and the
  dashboard read; ``reports``: daemon reports for the fleet view;
- ``overlay``: the partial views and the broadcast tree (``palace_proto.overlay``,
  ``palace_proto.broadcast``) wired to the links: which peers are dialled, which links push;
- ``revocation``: dropping a revoked peer everywhere;
- ``network``: the parts wired for one membership, the peer port, the lifetime, the link hooks.

The store's side (``static_peers``, ``peer_addresses``) is ``palaced/store/peer_rows.py`` and
``queries.py``. Must not import handlers, api or app (they import this).
"""

from .network import ListenError as ListenError
from .network import Network as Network
from .network import NetworkSettings as NetworkSettings

__all__ = ["ListenError", "Network", "NetworkSettings"]
