-- 0003: what the network layer remembers across restarts.
--
-- bindings: origin → member certificate (PEM) that binds it to a key, learned from hellos and
--   members messages (CA-verified before they are stored). Persisted so a relay that restarts can
--   still hand the bindings of origins it relays to peers that never met them.
-- invites: invites this daemon issued (it holds the CA key). Single use: used_by is set, in the
--   same transaction that issues the certificate, before the joiner hears back.
-- static_peers: addresses added with `palacectl peers add` (dialled forever, with back-off).
-- peer_addresses: where we last reached each peer (dialled at start-up, before mDNS says anything).

CREATE TABLE bindings (
    origin      TEXT PRIMARY KEY,
    certificate BLOB NOT NULL
) STRICT;

CREATE TABLE invites (
    invite_id  TEXT PRIMARY KEY,
    secret     BLOB NOT NULL,
    role       TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    used_by    TEXT,
    used_at    TEXT
) STRICT;

CREATE TABLE static_peers (
    address  TEXT PRIMARY KEY,
    added_at TEXT NOT NULL
) STRICT;

CREATE TABLE peer_addresses (
    peer_id   TEXT NOT NULL,
    address   TEXT NOT NULL,
    source    TEXT NOT NULL,
    last_ok   TEXT NOT NULL,
    PRIMARY KEY (peer_id, address)
) STRICT;
