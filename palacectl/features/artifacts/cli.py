"""palacectl's artifact and patch commands: content-addressed bytes, and patches delivered with them.

Owns: the ``artifact`` group (put: any bytes from a file or stdin, byte-exact; get: the exact bytes
to stdout or ``--out``, sha256 verified before anything is written) and the ``patch`` group (submit:
store a diff and announce it with ``patch.ready`` in one transaction). Writing ``--out`` goes
through ``palacectl.files`` (atomic, the user's usual mode). The root registers what ``COMMANDS``
and ``GROUPS`` name."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, Optional

import typer

from ... import output
from ...cli.common import JsonOpt, UsageProblem, call_daemon, field_option, parse_metadata, read_input, with_options
from ...output import emit, fail, warn, write_stdout
from .patch import PATCH_FIELDS

__all__ = ["COMMANDS", "GROUPS", "artifact_app", "patch_app"]

artifact_app = typer.Typer(no_args_is_help=True, help="Store and fetch content-addressed artifacts.")
patch_app = typer.Typer(no_args_is_help=True, help="Deliver patches.")


def _print_warnings(record: dict[str, Any]) -> None:
    for message in record.get("warnings", []):
        warn(message)


@artifact_app.command("put")
def artifact_put(
    kind: Annotated[str, typer.Option(help="patch, file, log, json or note.")],
    created_by: Annotated[str, typer.Option("--created-by")],
    file: Annotated[str, typer.Option("--file", help="Path, or - for stdin (default).")] = "-",
    metadata: Annotated[Optional[str], typer.Option()] = None,
    json_: JsonOpt = False,
) -> None:
    """Store bytes (any bytes) by content; identical bytes are stored once."""
    content = read_input(file, "--file")
    record = call_daemon("artifact_put", kind=kind, created_by=created_by, content=content, metadata=parse_metadata(metadata))
    _print_warnings(record)
    emit(record, json_, f"Stored {record['id']}  kind={record['kind']}\n  sha256={record['sha256']}\n"
                        f"  size={record['size_bytes']} bytes")


@artifact_app.command("get")
def artifact_get(
    artifact_id: Annotated[str, typer.Argument(help="art_… id or sha256.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the bytes to this file.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Write an artifact's exact bytes to stdout or --out (sha256 verified on arrival)."""
    import hashlib  # here: OpenSSL's hashlib costs ~4 ms to load, and only this command needs it

    record = call_daemon("artifact_get", artifact_id=artifact_id)
    content: bytes = record.pop("content")
    if hashlib.sha256(content).hexdigest() != record["sha256"]:
        fail(f"artifact {record['id']} failed hash verification; nothing written", code="integrity")
    if out is not None:
        from ...files import new_file_mode, write_atomically

        try:
            # The user's usual mode for a new file (umask), as `cp` would give it.
            write_atomically(out, content, new_file_mode())
        except OSError as exc:
            fail(f"cannot write {out}: {exc.strerror or exc}")
    if emit({**record, "content_written_to": str(out) if out is not None else None}, json_):
        return
    if out is not None:
        write_stdout(f"Wrote {len(content)} bytes to {out}\n  sha256={record['sha256']}\n")
    else:
        sys.stdout.buffer.write(content)
        sys.stdout.buffer.flush()


# Why these helps: a patch's routing defaults to its task's (the daemon's patch_submit).
_PATCH_HELP: Final = {"to_agent": "Default: who requested the task.", "correlation_id": "The task this answers.",
                      "stream": "Default: the stream of the task on this correlation.", "room": "Default: patches."}


def _patch_options() -> list[inspect.Parameter]:
    """``patch submit``'s options for its announcement's fields: the sender's identity required."""
    return [field_option(field, help=_PATCH_HELP.get(field.option), required=field.option == "from_agent",
                         default="patches" if field.option == "room" else None) for field in PATCH_FIELDS]


@patch_app.command("submit")
@with_options(_patch_options())
def patch_submit(
    file: Annotated[str, typer.Option("--file", help="The diff, or - for stdin (default).")] = "-",
    json_: JsonOpt = False,
    **fields: Any,
) -> None:
    """Store a patch and announce it with patch.ready, in one transaction.

    Give --correlation-id (the task it answers) or --stream: with a correlation, the stream and
    --to-agent default to its task's."""
    if fields["stream"] is None and fields["correlation_id"] is None:
        raise UsageProblem("pass --correlation-id (the task this patch answers; its stream is used) or --stream")
    content = read_input(file, "--file")
    result = call_daemon("patch_submit", **{**fields, "metadata": parse_metadata(fields["metadata"])},
                         content=content)
    _print_warnings(result["artifact"])
    if emit(result, json_):
        return
    a = result["artifact"]
    write_stdout(f"Stored {a['id']}  sha256={a['sha256']}  size={a['size_bytes']} bytes\n"
                 + output.event_line(result["event"]) + "\n")


COMMANDS: Final[dict[str, Callable[..., None]]] = {}
GROUPS: Final = {"artifact": artifact_app, "patch": patch_app}
