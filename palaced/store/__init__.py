"""The replica's storage: the synchronous apsw store (``store.Store``, the owner of the small state
objects one module per responsibility works on — see store.py) and its trio adapter (aio.py).

What a write job does is a function of the store taking its ``WriteContext`` first (state.py
holds the state alone): the ones the daemon's jobs call are named here — an append, a registry
event, an artifact, a redaction, peers' events, history, bindings, and the reads a job makes in
its own transaction.

Import direction: palace_proto → palaced.store → everything else in palaced.
"""

from .apply import apply_remote as apply_remote
from .imports import import_history as import_history
from .origins import save_bindings as save_bindings
from .queries import correlation_events as correlation_events
from .queries import event_by_id as event_by_id
from .queries import events_of_types_after_seq as events_of_types_after_seq
from .queries import latest_seq_of_types as latest_seq_of_types
from .state import WriteContext as WriteContext
from .store import DB_FILENAME as DB_FILENAME
from .store import Store as Store
from .store import StoreError as StoreError
from .store import WriteBatchResult as WriteBatchResult
from .writes import append_event as append_event
from .writes import append_record as append_record
from .writes import append_system as append_system
from .writes import put_artifact as put_artifact
from .writes import put_verified_artifact as put_verified_artifact
from .writes import redact as redact
