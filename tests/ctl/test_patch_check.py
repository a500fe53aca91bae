"""What an integrator refuses to apply (palacectl/features/integrate/patch_check.py), from the
patch's own headers: paths out of the tree or into .git, hooks, submodules, links out, size. The
patches are what ``git diff --binary`` writes, made by real git in a scratch repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from palacectl.features.integrate.patch_check import check_patch, patch_paths
from tests.helpers import init_repo, run_git


def _diff_of(tmp_path: Path, change) -> bytes:
    repo = tmp_path / "repo"
    base = init_repo(repo)
    change(repo)
    run_git(repo, "add", "-A", check=True)
    return subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--binary", base], check=True,
                          capture_output=True).stdout


def test_an_ordinary_patch_passes_and_names_its_files(tmp_path):
    def change(repo: Path) -> None:
        (repo / "src").mkdir()
        (repo / "src" / "a b.py").write_text("print(1)\n")
        (repo / "README.md").write_text("changed\n")
        (repo / "bin.dat").write_bytes(bytes(range(256)))

    patch = _diff_of(tmp_path, change)
    assert check_patch(patch) == []
    assert {p for f in patch_paths(patch) for p in f.paths} == {"README.md", "src/a b.py", "bin.dat"}


@pytest.mark.parametrize(("header", "words"), [
    ("diff --git a/.git/hooks/pre-commit b/.git/hooks/pre-commit", "inside .git"),
    ("diff --git a/sub/.GIT/config b/sub/.GIT/config", "inside .git"),
    ("diff --git a/GIT~1/config b/GIT~1/config", "inside .git"),
    ("diff --git a/../escape b/../escape", "climbs out of the repository"),
    ("diff --git a//etc/passwd b//etc/passwd", "an absolute path"),
    ("diff --git a/.husky/pre-commit b/.husky/pre-commit", "a hook a hook manager runs"),
    ("diff --git a/.githooks/post-merge b/.githooks/post-merge", "a hook a hook manager runs"),
    ("diff --git a/.gitmodules b/.gitmodules", "git configuration (.gitmodules)"),
])
def test_paths_out_of_the_tree_into_git_or_hooks_are_refused(header, words):
    path = header.split(" b/", 1)[1]
    patch = f"{header}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n".encode()
    problems = check_patch(patch)
    assert problems and words in problems[0], problems


def test_a_rename_into_git_is_refused_by_its_target(tmp_path):
    patch = (b"diff --git a/notes.txt b/x/.git/config\nsimilarity index 100%\nrename from notes.txt\n"
             b"rename to x/.git/config\n")
    assert any("x/.git/config: inside .git" in p for p in check_patch(patch))


def test_a_submodule_and_links_out_of_the_tree_are_refused_and_a_link_inside_is_not(tmp_path):
    sub = (b"diff --git a/vendor/lib b/vendor/lib\nnew file mode 160000\nindex 0000000..1234567\n--- /dev/null\n"
           b"+++ b/vendor/lib\n@@ -0,0 +1 @@\n+Subproject commit " + b"1" * 40 + b"\n")
    assert "a nested repository" in check_patch(sub)[0]

    def links(repo: Path) -> None:
        (repo / "docs").mkdir()
        (repo / "docs" / "inside").symlink_to("../README.md")
        (repo / "docs" / "outside").symlink_to("../../secret")
        (repo / "abs").symlink_to("/etc/passwd")

    problems = check_patch(_diff_of(tmp_path, links))
    assert sorted(problems) == ["abs: a symbolic link to an absolute path (/etc/passwd)",
                                "docs/outside: a symbolic link out of the repository (../../secret)"]


def test_size_and_nonsense_are_refused():
    assert "more than the 10 an integrator lands" in check_patch(b"x" * 11, max_bytes=10)[0]
    assert check_patch(b"hello, not a diff\n") == ["the patch names no file (not a git diff)"]
    many = b"".join(f"diff --git a/.git/f{i} b/.git/f{i}\n".encode() for i in range(9))
    problems = check_patch(many)
    assert len(problems) == 6 and problems[-1] == "and 4 more"


def test_what_git_says_a_commit_changed_is_judged_by_the_same_rules():
    """``check_files`` judges git's own list of a commit's changes (``Branch.changes``): a header this
    module misread would still not carry a path into .git, a submodule or a link out."""
    from palacectl.features.integrate.patch_check import PatchFile, check_files

    assert check_files([PatchFile(("src/ok.py",), "100644", None)]) == []
    assert check_files([PatchFile(("a/.git/config",), "100644", None), PatchFile(("vendor",), "160000", None),
                        PatchFile(("x/link",), "120000", "../../out")]) == [
        "a/.git/config: inside .git (the repository's own files)", "vendor: a nested repository (a submodule)",
        "x/link: a symbolic link out of the repository (../../out)"]
    assert check_patch(b"diff --git a/x y b/z w\nGIT binary patch\n") == [
        "the patch holds a file whose name cannot be read from its headers"]
