"""palacectl export and import: a palace log as NDJSON, to move logs between palaces or audit them.

Owns: ``export`` (pages of signed events from the daemon, written as the lines of
``palace_proto.export``: a header, each origin's public key before its first event, artifacts
inline with ``--with-artifacts``, then the events) and ``import`` (reads such a file, checks
every line, and hands the events to the daemon in batches; the daemon verifies each signature
and stores them as history). A file is written beside its name and renamed when complete, so an
interrupted export never leaves a truncated file under the name asked for. Long runs show a
progress bar on a terminal, and nothing else on stderr otherwise.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import IO, Annotated, Any, Optional

import typer

from .cli import JsonOpt, _home, app
from .client import Client
from .output import ProgressBar, emit_json, fail, note, write_stdout

__all__ = ["export", "import_"]

PAGE = 500
# Why ~1 MiB: an import request stays far below the frame limit however large the bodies.
IMPORT_BATCH_BYTES = 1 << 20


def _signed_event(wire: dict[str, Any]) -> Any:
    from palace_proto.export import event_from_export

    return event_from_export({k: v for k, v in wire.items() if k != "seq"})


# palace_proto.export needs the signature code (cryptography): imported by these two commands
# only, so every other palacectl command starts without it.


@app.command()
def export(
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here (default: stdout).")] = None,
    since_event_id: Annotated[Optional[str], typer.Option("--since-event-id", help="Only events after this one.")] = None,
    stream: Annotated[Optional[list[str]], typer.Option("--stream", help="Only this stream (repeatable).")] = None,
    with_artifacts: Annotated[bool, typer.Option("--with-artifacts", help="Include artifacts' bytes inline.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Write the log (or part of it) as NDJSON: signed events, their origins' keys, artifacts."""
    from palace_proto.export import artifact_line, event_line, header_line, origin_line

    if output is None and json_:
        fail("--json reports on a file: add --output FILE (without it the export itself goes to stdout)",
             code="usage", exit_code=64)
    target = output.expanduser().absolute() if output else None
    partial = target.with_name(f".{target.name}.partial") if target else None
    bar = ProgressBar("exporting")
    counts = {"events": 0, "origins": 0, "artifacts": 0}
    with Client(_home()) as client:
        status = client.call("status")
        sink: IO[str] = open(partial, "w", encoding="utf-8") if partial else sys.stdout  # noqa: SIM115
        try:
            sink.write(header_line(
                datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                {"origin": status["origin"], "palace": status.get("palace")},
                {"since_event_id": since_event_id, "streams": stream or None, "with_artifacts": with_artifacts}))
            seen_origins: set[str] = set()
            seen_artifacts: set[str] = set()
            args: dict[str, Any] = {"limit": PAGE, "with_total": True}
            if since_event_id:
                args["since_event_id"] = since_event_id
            if stream:
                args["streams"] = stream
            total = None
            while True:
                page = client.call("export_page", **args)
                total = page.get("total", total)
                for wire in page["events"]:
                    origin = wire["origin"]
                    if origin not in seen_origins:
                        sink.write(origin_line(origin, bytes.fromhex(page["origins"][origin])))
                        seen_origins.add(origin)
                    if with_artifacts:
                        for artifact_id in wire["artifact_ids"]:
                            if artifact_id in seen_artifacts:
                                continue
                            seen_artifacts.add(artifact_id)
                            try:
                                record = client.call("artifact_get", artifact_id=artifact_id)
                            except Exception as exc:  # an artifact this replica never received: say so, go on
                                note(f"Warning: artifact {artifact_id} is not on this replica ({exc}); exported "
                                     "by reference only")
                                continue
                            sink.write(artifact_line(record, record["content"]))
                    sink.write(event_line(_signed_event(wire)))
                    counts["events"] += 1
                bar.update(counts["events"], total or counts["events"])
                if page["done"]:
                    break
                args = {"limit": PAGE, "after_seq": page["next_after_seq"]}
                if stream:
                    args["streams"] = stream
            sink.flush()
            if partial is not None:
                os.fsync(sink.fileno())
        except BaseException:
            if partial is not None:
                sink.close()
                partial.unlink(missing_ok=True)
            raise
        finally:
            bar.close()
        if partial is not None and target is not None:
            sink.close()
            os.chmod(partial, 0o600)  # a log is private, like the database it came from
            os.replace(partial, target)
    counts["origins"], counts["artifacts"] = len(seen_origins), len(seen_artifacts)
    if target is None:
        return
    if json_:
        emit_json({"path": str(target), **counts})
    else:
        write_stdout(f"Exported {counts['events']:,} events from {counts['origins']} origin(s)"
                     + (f" and {counts['artifacts']} artifact(s)" if with_artifacts else "") + f" to {target}\n")


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="An export made by `palacectl export` (- for stdin).")],
    json_: JsonOpt = False,
) -> None:
    """Verify and store the events of an export as history (they are not replicated to peers)."""
    from palace_proto.export import ExportError, parse_line

    source: IO[str]
    if str(file) == "-":
        source = sys.stdin
        size = None
    else:
        try:
            source = open(file, encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            fail(f"cannot read {file}: {exc.strerror or exc}", code="invalid_argument")
        size = os.fstat(source.fileno()).st_size
    bar = ProgressBar("importing")
    totals: dict[str, Any] = {"imported": 0, "duplicates": 0, "artifacts": 0, "refused": []}
    origins: dict[str, str] = {}
    batch: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    batch_bytes = 0
    read = 0
    with Client(_home()) as client:

        def flush() -> None:
            nonlocal batch, artifacts, batch_bytes
            if not batch and not artifacts:
                return
            result = client.call("import_events", events=batch, artifacts=artifacts,
                                 origins={o: origins[o] for o in {e.get("origin") for e in batch} if o in origins})
            for key in ("imported", "duplicates", "artifacts"):
                totals[key] += result[key]
            totals["refused"] += result["refused"]
            batch, artifacts, batch_bytes = [], [], 0

        try:
            for number, line in enumerate(source, start=1):
                read += len(line.encode("utf-8"))
                if not line.strip():
                    continue
                try:
                    kind, payload = parse_line(line)
                except ExportError as exc:
                    fail(f"{file} line {number}: {exc}; nothing after it was imported (what came before was)",
                         code="invalid_argument")
                if number == 1 and kind != "header":
                    fail(f"{file} is not a palace export (its first line is not the export header)",
                         code="invalid_argument")
                if kind == "origin":
                    origins[payload[0]] = payload[1].hex()
                elif kind == "artifact":
                    record, content = payload
                    artifacts.append({**record, "content": content})
                    batch_bytes += len(content)
                elif kind == "event":
                    batch.append(payload)
                    batch_bytes += len(line)
                if len(batch) >= PAGE or batch_bytes >= IMPORT_BATCH_BYTES:
                    flush()
                    bar.update(read, size or read)
            flush()
        except UnicodeDecodeError as exc:
            fail(f"{file} is not UTF-8 text (byte {exc.start}); name an export made by `palacectl export`",
                 code="invalid_argument")
        finally:
            bar.update(read, size or read, force=True)
            bar.close()
    if json_:
        emit_json(totals)
        return
    write_stdout(f"Imported {totals['imported']:,} event(s) as history ({totals['duplicates']:,} already here"
                 + (f", {totals['artifacts']} artifact(s)" if totals["artifacts"] else "") + ").\n")
    for item in totals["refused"][:20]:
        write_stdout(f"  refused {item['id']}: {item['reason']}\n")
    if len(totals["refused"]) > 20:
        write_stdout(f"  … and {len(totals['refused']) - 20} more refused (--json lists them all)\n")
