"""palacectl export and import: a palace log as NDJSON, to move logs between palaces or audit them.

Owns: ``export`` (pages of signed events from the daemon, written as the lines of
``palace_proto.export``: a header, each origin's public key before its first event, artifacts
inline with ``--with-artifacts``, then the events) and ``import`` (reads such a file, verifies
every line, and hands the events to the daemon in batches). A file is written through
``palacectl.files`` (0600 from its first byte, renamed when complete, the folder fsynced), so an
interrupted export never leaves a truncated file under the name asked for. Long runs show a
progress bar on a terminal, and nothing else on stderr otherwise.

Import is all or nothing with respect to the file's integrity. It reads the file twice: the
first pass verifies every line (shape, event id, hash, body hash, signature against the key the
file gives the origin; artifacts against their sha256) and keeps only the keys, the numbers of
the lines that fail and the first ``MAX_LISTED_FAILURES`` reasons — never the events themselves,
so a large export costs one line of memory at a time. Any failure: nothing is sent, exit 1, each
failure named. ``--partial``: the second pass sends what verified, and the failures are listed
(exit 0: what was asked for — everything that verifies — is stored; scripts read ``failed``).
The daemon checks every request again by itself (``import_events`` refuses a whole request with
a failing event unless ``partial`` is set), so a file changed between the passes cannot slip
anything in. Policy refusals (this replica's own origin, origins this palace replicates, another
key or event already held here) are not failures: the events verify and this palace declines
them; they are listed under ``refused`` and never change the exit code. Standard input (``-``)
is buffered in memory up to ``STDIN_SPOOL_MEMORY_BYTES``, then in a private temporary file.

The backup feature's ``cli`` names these two commands to the root.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Any, BinaryIO, Final, Optional

import typer

from palace_proto.errors import ApiError

from ...cli.common import JsonOpt, current_home
from ...client import Client
from ...output import EXIT_FAILED, ProgressBar, emit, emit_json, fail, note, utc_now, write_stdout

__all__ = ["export", "import_"]

PAGE: Final = 500
# Why ~1 MiB: an import request stays far below the frame limit however large the bodies.
IMPORT_BATCH_BYTES: Final = 1 << 20
# Why 8 MiB: an export piped on stdin is kept in memory up to this size, then spooled to a private
# temporary file (0600, deleted when closed): memory stays bounded, and small pipes touch no disk.
STDIN_SPOOL_MEMORY_BYTES: Final = 8 << 20
# Why 256 MiB: far above the longest honest line (a 64 MiB artifact is ~86 MiB of base64); a longer
# line is a failure read past in pieces, never held whole.
MAX_LINE_BYTES: Final = 256 << 20
# Why 1000: each failure is named; past this many the file is not an export with a few damaged
# lines, and the rest are counted, not listed (the list would only flood the terminal).
MAX_LISTED_FAILURES: Final = 1000
# Why 20: the human summary lists this many policy refusals; --json lists every one.
SHOWN_REFUSALS: Final = 20


def _signed_event(wire: dict[str, Any]) -> Any:
    from palace_proto.export import event_from_export

    return event_from_export({k: v for k, v in wire.items() if k != "seq"})


# palace_proto.export needs the signature code (cryptography): imported by these two commands
# only, so every other palacectl command starts without it.


def export(
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here (default: stdout).")] = None,
    since_event_id: Annotated[Optional[str], typer.Option("--since-event-id", help="Only events after this one.")] = None,
    stream: Annotated[Optional[list[str]], typer.Option("--stream", help="Only this stream (repeatable).")] = None,
    with_artifacts: Annotated[bool, typer.Option("--with-artifacts", help="Include artifacts' bytes inline.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Write the log (or part of it) as NDJSON: signed events, their origins' keys, artifacts."""
    if output is None and json_:
        fail("--json reports on a file: add --output FILE (without it the export itself goes to stdout)",
             code="usage", exit_code=64)
    target = output.expanduser().absolute() if output else None
    bar = ProgressBar("exporting")
    with Client(current_home()) as client:
        status = client.call("status")
        try:
            if target is None:
                counts = _write_export(sys.stdout.buffer, client, status, bar, since_event_id, stream, with_artifacts)
                sys.stdout.buffer.flush()
            else:
                from ...files import replacing

                try:
                    with replacing(target, 0o600) as pending:  # a log is private, like the database it came from
                        counts = _write_export(pending.file, client, status, bar, since_event_id, stream,
                                               with_artifacts)
                except OSError as exc:
                    fail(f"cannot write {target}: {exc.strerror or exc}; nothing was written there")
        finally:
            bar.close()
    if target is None:
        return
    emit({"path": str(target), **counts}, json_,
         f"Exported {counts['events']:,} events from {counts['origins']} origin(s)"
         + (f" and {counts['artifacts']} artifact(s)" if with_artifacts else "") + f" to {target}")


def _write_export(sink: BinaryIO, client: Client, status: dict[str, Any], bar: ProgressBar,
                  since_event_id: str | None, stream: list[str] | None, with_artifacts: bool) -> dict[str, int]:
    """Write every line of the export to ``sink``; returns the counts."""
    from palace_proto.export import artifact_line, event_line, header_line, origin_line

    def put(line: str) -> None:
        sink.write(line.encode("utf-8"))

    put(header_line(
        utc_now(),
        {"origin": status["origin"], "palace": status.get("palace")},
        {"since_event_id": since_event_id, "streams": stream or None, "with_artifacts": with_artifacts}))
    seen_origins: set[str] = set()
    seen_artifacts: set[str] = set()
    events = 0
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
                put(origin_line(origin, bytes.fromhex(page["origins"][origin])))
                seen_origins.add(origin)
            if with_artifacts:
                for artifact_id in wire["artifact_ids"]:
                    if artifact_id in seen_artifacts:
                        continue
                    seen_artifacts.add(artifact_id)
                    try:
                        record = client.call("artifact_get", artifact_id=artifact_id)
                    except ApiError as exc:  # an artifact this replica never received: say so, go on
                        note(f"Warning: artifact {artifact_id} is not on this replica ({exc}); exported "
                             "by reference only")
                        continue
                    put(artifact_line(record, record["content"]))
            put(event_line(_signed_event(wire)))
            events += 1
        bar.update(events, total or events)
        if page["done"]:
            break
        args = {"limit": PAGE, "after_seq": page["next_after_seq"]}
        if stream:
            args["streams"] = stream
    return {"events": events, "origins": len(seen_origins), "artifacts": len(seen_artifacts)}


# -- import ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Scan:
    """What the verifying pass keeps of a file: keys, which lines fail, and why (the first few)."""

    keys: dict[str, bytes] = field(default_factory=dict)
    bad_lines: set[int] = field(default_factory=set)
    failures: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0
    artifacts: int = 0

    def failed(self, number: int, kind: str, ident: Any, reason: str) -> None:
        self.bad_lines.add(number)
        if len(self.failures) < MAX_LISTED_FAILURES:
            self.failures.append({"line": number, "kind": kind, "id": ident if isinstance(ident, str) else None,
                                  "reason": reason})


def _lines(source: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) for each line; None for a line longer than MAX_LINE_BYTES (read past
    in pieces, never held whole)."""
    number = 0
    while True:
        line = source.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):
                line = source.readline(1 << 20)
            yield number, None
        else:
            yield number, line


def _describe(failure: dict[str, Any]) -> str:
    where = f"line {failure['line']}" + (f" ({failure['id']})" if failure.get("id") else "")
    return f"{where}: {failure['reason']}"


def _scan(source: IO[bytes], name: str, size: int | None) -> _Scan:
    """The verifying pass. Fails at once (one line) only when the file is not an export at all."""
    from palace_proto.export import ExportError, parse_line, verify_export_artifact, verify_export_event

    scan = _Scan()
    seen_header = False
    read = 0
    bar = ProgressBar("verifying")
    try:
        for number, raw in _lines(source):
            read += len(raw) if raw is not None else MAX_LINE_BYTES
            bar.update(read, size or read)
            if raw is None:
                if not seen_header:
                    fail(f"{name} is not a palace export (its first line is longer than {MAX_LINE_BYTES >> 20} MiB)",
                         code="invalid_argument")
                scan.failed(number, "line", None, f"longer than {MAX_LINE_BYTES >> 20} MiB")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if not seen_header:
                    fail(f"{name} is not UTF-8 text (byte {exc.start}); name an export made by `palacectl export`",
                         code="invalid_argument")
                scan.failed(number, "line", None, f"not UTF-8 text (byte {exc.start})")
                continue
            if not text.strip():
                continue
            try:
                kind, payload = parse_line(text)
            except ExportError as exc:
                if not seen_header:
                    fail(f"{name} line {number}: {exc}; name an export made by `palacectl export`",
                         code="invalid_argument")
                scan.failed(number, "line", None, str(exc))
                continue
            if not seen_header:
                if kind != "header":
                    fail(f"{name} is not a palace export (its first line is not the export header)",
                         code="invalid_argument")
                seen_header = True
                continue
            if kind == "origin":
                origin, key = payload
                if scan.keys.setdefault(origin, key) != key:
                    scan.failed(number, "origin", origin, "a second, different public key for this origin")
            elif kind == "artifact":
                record, content = payload
                try:
                    verify_export_artifact(record, content)
                except ExportError as exc:
                    scan.failed(number, "artifact", record.get("id"), str(exc))
                else:
                    scan.artifacts += 1
            elif kind == "event":
                try:
                    verify_export_event(payload, scan.keys)
                except ExportError as exc:
                    scan.failed(number, "event", payload.get("id") if isinstance(payload, dict) else None, str(exc))
                else:
                    scan.events += 1
            # a later header: exports joined with `cat` are one import
    finally:
        bar.update(read, size or read, force=True)
        bar.close()
    if not seen_header:
        fail(f"{name} is empty: not a palace export", code="invalid_argument")
    return scan


def _send(client: Client, source: IO[bytes], scan: _Scan, size: int | None, partial: bool) -> dict[str, Any]:
    """The importing pass: the lines that verified, in batches; returns the daemon's totals."""
    from palace_proto.export import parse_line

    bar = ProgressBar("importing")
    totals: dict[str, Any] = {"imported": 0, "duplicates": 0, "artifacts": 0, "refused": []}
    late_failures: list[dict[str, Any]] = []
    batch: list[dict[str, Any]] = []
    batch_lines: list[int] = []
    artifacts: list[dict[str, Any]] = []
    artifact_lines: list[int] = []
    batch_bytes = 0
    read = 0

    def flush() -> None:
        nonlocal batch, batch_lines, artifacts, artifact_lines, batch_bytes
        if not batch and not artifacts:
            return
        origins = {e.get("origin") for e in batch if isinstance(e, dict)}
        result = client.call("import_events", events=batch, artifacts=artifacts, partial=partial,
                             origins={o: scan.keys[o].hex() for o in origins if isinstance(o, str) and o in scan.keys})
        for key in ("imported", "duplicates", "artifacts"):
            totals[key] += result[key]
        totals["refused"] += result["refused"]
        for failure in result.get("failed", []):  # only if the file changed since it was verified
            lines = batch_lines if failure.get("kind") == "event" else artifact_lines
            index = failure.get("index")
            line = lines[index] if isinstance(index, int) and 0 <= index < len(lines) else None
            late_failures.append({"line": line, "kind": failure.get("kind"), "id": failure.get("id"),
                                  "reason": failure.get("reason")})
        batch, batch_lines, artifacts, artifact_lines, batch_bytes = [], [], [], [], 0

    try:
        for number, raw in _lines(source):
            read += len(raw) if raw is not None else MAX_LINE_BYTES
            if raw is None or number in scan.bad_lines:
                continue
            text = raw.decode("utf-8")
            if not text.strip():
                continue
            kind, payload = parse_line(text)
            if kind == "artifact":
                record, content = payload
                artifacts.append({**record, "content": content})
                artifact_lines.append(number)
                batch_bytes += len(content)
            elif kind == "event":
                batch.append(payload)
                batch_lines.append(number)
                batch_bytes += len(raw)
            if len(batch) >= PAGE or len(artifacts) >= PAGE or batch_bytes >= IMPORT_BATCH_BYTES:
                flush()
                bar.update(read, size or read)
        flush()
    except ApiError as exc:
        stored = (f"; {totals['imported']:,} event(s) were stored before it (import the file again to finish: "
                  "what is held already counts as a duplicate)" if totals["imported"] else "; nothing was stored")
        if exc.code == "invalid_argument" and isinstance(exc.detail, dict) and exc.detail.get("failures"):
            fail(f"the daemon refused events that verified when the file was read ({exc.message}): did the file "
                 f"change during the import?{stored}", code="integrity")
        fail(f"{exc.message}{stored}", code=exc.code)
    except (ValueError, LookupError) as exc:  # a line that verified in the first pass no longer parses
        fail(f"the file changed during the import ({exc}){'; some events were stored' if totals['imported'] else ''}"
             "; import it again once it is settled", code="integrity")
    finally:
        bar.update(read, size or read, force=True)
        bar.close()
    totals["late_failures"] = late_failures
    return totals


def _open_source(file: Path) -> tuple[IO[bytes], str, int | None]:
    """The file (or stdin, buffered so it can be read twice), its name for messages, its size."""
    if str(file) == "-":
        if sys.stdin.isatty():
            note("Reading standard input from the terminal; end with Ctrl-D (or pass a file instead).")
        import tempfile

        spool = tempfile.SpooledTemporaryFile(max_size=STDIN_SPOOL_MEMORY_BYTES)  # noqa: SIM115  (0600, unlinked)
        try:
            while chunk := sys.stdin.buffer.read(1 << 20):
                spool.write(chunk)
            size = spool.tell()
            spool.seek(0)
        except OSError as exc:
            spool.close()
            fail(f"cannot buffer standard input: {exc.strerror or exc}; save the export to a file and import that",
                 code="invalid_argument")
        return spool, "standard input", size
    try:
        source = open(file, "rb")  # noqa: SIM115
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", code="invalid_argument")
    return source, str(file), os.fstat(source.fileno()).st_size


def _unchanged(source: IO[bytes], before: os.stat_result | None) -> bool:
    if before is None:
        return True
    after = os.fstat(source.fileno())
    return (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def import_(
    file: Annotated[Path, typer.Argument(help="An export made by `palacectl export` (- for stdin).")],
    partial: Annotated[bool, typer.Option(
        "--partial", help="Import the events that verify even if others do not (each failure is listed).")] = False,
    json_: JsonOpt = False,
) -> None:
    """Verify every line of an export, then store its events as history (never replicated to peers).

    Any line that fails verification (an altered event, a missing key, bytes that do not match
    their sha256): nothing is imported and each failure is named (exit 1). --partial imports
    what verifies and lists the rest (exit 0; --json: `failed`).
    """
    source, name, size = _open_source(file)
    with source:
        before = os.fstat(source.fileno()) if name != "standard input" else None
        try:
            scan = _scan(source, name, size)
        except OSError as exc:
            fail(f"cannot read {name}: {exc.strerror or exc}", code="invalid_argument")
        failure_count = len(scan.bad_lines)
        if failure_count and not partial:
            _report_failures(name, scan, failure_count, as_json=json_)
            raise typer.Exit(EXIT_FAILED)
        if not _unchanged(source, before):
            fail(f"{name} changed while it was being verified; nothing was imported; import it again once it is "
                 "settled", code="integrity")
        source.seek(0)
        with Client(current_home()) as client:
            totals = _send(client, source, scan, size, partial)
    late = totals.pop("late_failures")  # only if the file changed between the passes
    failed = scan.failures + late
    totals["failed"], totals["failed_count"] = failed, failure_count + len(late)
    if emit(totals, json_):
        return
    write_stdout(f"Imported {totals['imported']:,} event(s) as history ({totals['duplicates']:,} already here"
                 + (f", {totals['artifacts']} artifact(s)" if totals["artifacts"] else "") + ").\n")
    for item in totals["refused"][:SHOWN_REFUSALS]:
        write_stdout(f"  refused {item['id']}: {item['reason']}\n")
    if len(totals["refused"]) > SHOWN_REFUSALS:
        write_stdout(f"  … and {len(totals['refused']) - SHOWN_REFUSALS} more refused (--json lists them all)\n")
    if failed:
        note(f"Skipped {totals['failed_count']:,} line(s) of {name} that fail verification (--partial):")
        for failure in failed:
            note(f"  {_describe(failure)}")
        if totals["failed_count"] > len(failed):
            note(f"  … and {totals['failed_count'] - len(failed):,} more")


def _report_failures(name: str, scan: _Scan, count: int, *, as_json: bool) -> None:
    message = (f"{name}: {count:,} line(s) fail verification; nothing was imported (fix or re-export the file, "
               f"or pass --partial to import the {scan.events:,} event(s) that verify)")
    if as_json:
        emit_json({"error": {"code": "integrity", "message": message, "failures": scan.failures,
                             "failure_count": count}})
        return
    lines = [f"palacectl: {message}"] + [f"  {_describe(f)}" for f in scan.failures]
    if count > len(scan.failures):
        lines.append(f"  … and {count - len(scan.failures):,} more")
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
