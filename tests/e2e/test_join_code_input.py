"""``palacectl join`` takes the invite code from stdin (``-``) or ``--code-file`` as well as from
its argument (issue 11, finding 11): a code on the command line shows in `ps` and in the
shell's history, and it is a secret until used (whoever presents it first joins)."""

from __future__ import annotations

import json
import os

import pytest

from tests.fleet import ctl_json, wait_converged
from tests.helpers import run_ctl


def _joined(result, name: str) -> dict:
    assert result.returncode == 0, result
    joined = json.loads(result.stdout)
    assert joined["name"] == name and joined["role"] == "member"
    return joined


def test_join_reads_the_code_from_stdin_or_a_private_file(fleet, tmp_path):
    alpha = fleet.found("alpha")
    beta = fleet.start("beta")
    code = fleet.invite()
    # A code pasted with stray blanks and a CRLF still works: only the one line counts.
    joined = _joined(run_ctl(beta.home, "join", "-", "--name", "beta", "--json",
                             input=f"  {code}  \r\n".encode()), "beta")
    gamma = fleet.start("gamma")
    code_file = tmp_path / "invite.txt"
    code_file.write_text(fleet.invite() + "\n")
    code_file.chmod(0o600)
    _joined(run_ctl(gamma.home, "join", "--code-file", str(code_file), "--name", "gamma", "--json"), "gamma")
    assert ctl_json(gamma.home, "status")["palace"]["palace_id"] == joined["palace_id"]
    wait_converged(alpha, beta, gamma)
    delta = fleet.start("delta")  # the argument form keeps working
    _joined(run_ctl(delta.home, "join", fleet.invite(), "--name", "delta", "--json"), "delta")


@pytest.mark.parametrize(("args", "stdin", "file_content", "file_mode", "fragment"), [
    (["-"], b"", None, None, "standard input is empty"),
    (["-"], b"\n  \n", None, None, "standard input is empty"),
    (["--code-file", "{file}"], b"", b"palace1-one\npalace1-two\n", 0o600, "holds 2 lines"),
    (["-"], b"\xff\xfe\n", None, None, "standard input is not text"),
    (["-"], b"x" * 5000, None, None, "more than 4096 bytes"),
    (["--code-file", "{file}"], b"", b"", 0o600, "is empty"),
    (["--code-file", "{file}"], b"", b"palace1-abc\n", 0o644, "accessible by other users (mode 0644)"),
    (["--code-file", "{missing}"], b"", None, None, "cannot read --code-file"),
    (["palace1-abc", "--code-file", "{file}"], b"", b"palace1-abc\n", 0o600, "one of them"),
    ([], b"", None, None, "one of them"),
    (["   "], b"", None, None, "the invite code is empty"),
], ids=["empty-stdin", "blank-stdin", "two-line-file", "not-text", "too-long", "empty-file", "file-readable-by-others",
        "missing-file", "code-and-file", "no-code", "blank-argument"])
def test_bad_code_input_is_a_one_line_usage_error(daemon, tmp_path, args, stdin, file_content, file_mode, fragment):
    code_file = tmp_path / "code.txt"
    if file_content is not None:
        code_file.write_bytes(file_content)
        os.chmod(code_file, file_mode)
    argv = [a.format(file=code_file, missing=tmp_path / "nope.txt") for a in args]
    result = run_ctl(daemon.home, "join", *argv, input=stdin)
    assert result.returncode == 64, result
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert ctl_json(daemon.home, "status")["palace"] is None  # nothing was attempted
