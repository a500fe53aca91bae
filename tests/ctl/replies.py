"""Replies of a real palaced, as palacectl receives them, for the fake client's tables
(tests/ctl/fake_client.py): captured from a daemon (``palacectl … --json``), so a command is
tested against what it is really sent. Tests copy them before changing a field."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["PATCH_SUBMITTED", "TASK_CREATED", "TASK_VIEW"]

#: task_create: the request event and the hand-off to paste
TASK_CREATED: Final[dict[str, Any]] = {'task': {'id': 'evt_20261206T035724_b487f97a9d54d72e103a',
          'seq': 11,
          'origin': 'ori2_y2dcwxdnawnisdnzg7huybmoti',
          'origin_seq': 11,
          'type': 'task.request',
          'stream': 'project/palace',
          'room': 'delegation',
          'topic': None,
          'from_agent': 'alice',
          'to_agent': 'bob',
          'correlation_id': 'task_do_the_thing_1d07ab5e',
          'branch': 'feat/thing',
          'base_commit': 'abcdef1',
          'status': 'open',
          'ack_of': None,
          'artifact_ids': [],
          'body': 'Goal:\n'
                  'Do the thing\n'
                  '\n'
                  'Branch: feat/thing\n'
                  'Base commit: abcdef1\n'
                  '\n'
                  'Definition of done:\n'
                  'it is done\n'
                  '\n'
                  'Delivery:\n'
                  'Close the loop through palace: claim the request (MCP mempalace_event_ack with status claimed, '
                  'or palacectl ack <event id> --status claimed), then submit a patch (MCP mempalace_patch_submit '
                  'with correlation_id=task_do_the_thing_1d07ab5e, or palacectl patch submit --correlation-id '
                  'task_do_the_thing_1d07ab5e) or reply with status blocked/failed and the evidence, verbatim.',
          'metadata': {},
          'created_at': '2026-12-06T03:57:24.151187Z'},
 'handoff': 'Open palace task task_do_the_thing_1d07ab5e as bob. Claim it, follow its exact definition of done, '
            'and deliver through the log (MCP mempalace_task_status with '
            'correlation_id=task_do_the_thing_1d07ab5e, or palacectl task show task_do_the_thing_1d07ab5e).'}

#: task_show: a task bob claimed (its request and the claim)
TASK_VIEW: Final[dict[str, Any]] = {'correlation_id': 'task_do_the_thing_3617369a',
 'request': {'id': 'evt_20261206T035707_57e397eddfb4b9717629',
             'seq': 6,
             'origin': 'ori2_y2dcwxdnawnisdnzg7huybmoti',
             'origin_seq': 6,
             'type': 'task.request',
             'stream': 'project/palace',
             'room': 'delegation',
             'topic': None,
             'from_agent': 'alice',
             'to_agent': 'bob',
             'correlation_id': 'task_do_the_thing_3617369a',
             'branch': 'feat/thing',
             'base_commit': 'abcdef1',
             'status': 'open',
             'ack_of': None,
             'artifact_ids': [],
             'body': 'Goal:\n'
                     'Do the thing\n'
                     '\n'
                     'Branch: feat/thing\n'
                     'Base commit: abcdef1\n'
                     '\n'
                     'Definition of done:\n'
                     'it is done\n'
                     '\n'
                     'Delivery:\n'
                     'Close the loop through palace: claim the request (MCP mempalace_event_ack with status '
                     'claimed, or palacectl ack <event id> --status claimed), then submit a patch (MCP '
                     'mempalace_patch_submit with correlation_id=task_do_the_thing_3617369a, or palacectl patch '
                     'submit --correlation-id task_do_the_thing_3617369a) or reply with status blocked/failed and '
                     'the evidence, verbatim.',
             'metadata': {},
             'created_at': '2026-12-06T03:57:07.451736Z'},
 'opened_at': '2026-12-06T03:57:07.451736Z',
 'requests': [{'event_id': 'evt_20261206T035707_57e397eddfb4b9717629',
               'created_at': '2026-12-06T03:57:07.451736Z',
               'superseded': False}],
 'state': 'claimed',
 'terminal': False,
 'requested_by': 'alice',
 'assigned_to': 'bob',
 'claimed_by': 'bob',
 'claim_event_id': 'evt_20261206T035707_9ca0b4a10ef7aa231a82',
 'claims': ['bob'],
 'claim_events': [{'agent': 'bob',
                   'event_id': 'evt_20261206T035707_9ca0b4a10ef7aa231a82',
                   'created_at': '2026-12-06T03:57:07.774419Z'}],
 'conflicts': [],
 'out_of_role': [],
 'usage_reports': [],
 'blocked_by': [],
 'priority': 2,
 'stall_after_s': 1800,
 'stalled': False,
 'stalls_at': '2026-12-06T04:27:07.774419Z',
 'claimant_last_activity': '2026-12-06T03:57:07.774419Z',
 'last_activity': '2026-12-06T03:57:07.774419Z',
 'events': [{'id': 'evt_20261206T035707_57e397eddfb4b9717629',
             'seq': 6,
             'origin': 'ori2_y2dcwxdnawnisdnzg7huybmoti',
             'origin_seq': 6,
             'type': 'task.request',
             'stream': 'project/palace',
             'room': 'delegation',
             'topic': None,
             'from_agent': 'alice',
             'to_agent': 'bob',
             'correlation_id': 'task_do_the_thing_3617369a',
             'branch': 'feat/thing',
             'base_commit': 'abcdef1',
             'status': 'open',
             'ack_of': None,
             'artifact_ids': [],
             'body': 'Goal:\n'
                     'Do the thing\n'
                     '\n'
                     'Branch: feat/thing\n'
                     'Base commit: abcdef1\n'
                     '\n'
                     'Definition of done:\n'
                     'it is done\n'
                     '\n'
                     'Delivery:\n'
                     'Close the loop through palace: claim the request (MCP mempalace_event_ack with status '
                     'claimed, or palacectl ack <event id> --status claimed), then submit a patch (MCP '
                     'mempalace_patch_submit with correlation_id=task_do_the_thing_3617369a, or palacectl patch '
                     'submit --correlation-id task_do_the_thing_3617369a) or reply with status blocked/failed and '
                     'the evidence, verbatim.',
             'metadata': {},
             'created_at': '2026-12-06T03:57:07.451736Z'},
            {'id': 'evt_20261206T035707_9ca0b4a10ef7aa231a82',
             'seq': 7,
             'origin': 'ori2_y2dcwxdnawnisdnzg7huybmoti',
             'origin_seq': 7,
             'type': 'event.ack',
             'stream': 'project/palace',
             'room': 'delegation',
             'topic': None,
             'from_agent': 'bob',
             'to_agent': 'alice',
             'correlation_id': 'task_do_the_thing_3617369a',
             'branch': None,
             'base_commit': None,
             'status': 'claimed',
             'ack_of': 'evt_20261206T035707_57e397eddfb4b9717629',
             'artifact_ids': [],
             'body': 'bob claims task_do_the_thing_3617369a',
             'metadata': {'ack_of': 'evt_20261206T035707_57e397eddfb4b9717629'},
             'created_at': '2026-12-06T03:57:07.774419Z'}],
 'impersonations': 0,
 'waiting_on': [],
 'questions': [],
 'waiting_for_person': False,
 'waiting_for_approval': False}

#: patch_submit: the stored patch and its patch.ready event
PATCH_SUBMITTED: Final[dict[str, Any]] = {'artifact': {'id': 'art_c1cf66c8be8c195abfe1d0b4684a8378',
              'kind': 'patch',
              'sha256': 'c1cf66c8be8c195abfe1d0b4684a8378d946270071d7f66b928fbfe00b00f328',
              'size_bytes': 57,
              'created_by': 'bob',
              'created_at': '2026-12-06T03:57:20.004762Z'},
 'event': {'id': 'evt_20261206T035720_f7a230bd48b81268dbcf',
           'seq': 9,
           'origin': 'ori2_y2dcwxdnawnisdnzg7huybmoti',
           'origin_seq': 9,
           'type': 'patch.ready',
           'stream': 'project/palace',
           'room': 'patches',
           'topic': None,
           'from_agent': 'bob',
           'to_agent': 'alice',
           'correlation_id': 'task_do_the_thing_3617369a',
           'branch': None,
           'base_commit': None,
           'status': 'ready',
           'ack_of': None,
           'artifact_ids': ['art_c1cf66c8be8c195abfe1d0b4684a8378'],
           'body': '',
           'metadata': {},
           'created_at': '2026-12-06T03:57:20.005100Z'}}
