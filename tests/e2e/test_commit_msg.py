""".ci/commit-msg, the commit-message check CI runs (.ci/run) and pre-commit's commit-msg hook: a subject of at
most 72 characters, and a blank line between it and the body. Each test builds its own throwaway repository in
tmp_path; the project's own git state is never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.requirements import require

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci/commit-msg"
GOOD = "Live view: one poll per second"
LONG = "Live view: " + "every host's rate against its link, " * 3  # 119 characters
NO_BLANK = "A short subject\nand a body right under it"


def _env(home: Path) -> dict[str, str]:
    """git isolated from the user's and the machine's configuration and from any outer repository."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {
        **keep,
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }


class Repo:
    """A throwaway repository: git(*args) runs in it, commit(message) adds a commit, check(*args) runs the script."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "repo"
        self.path.mkdir()
        self.env = _env(tmp_path)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        done = subprocess.run(["git", *args], cwd=self.path, env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def commit(self, message: str) -> str:
        """A commit with exactly MESSAGE (git commit -F keeps it as written); its short hash."""
        name = f"f{len(list(self.path.iterdir()))}-{abs(hash(message))}"  # never the same file on two branches
        (self.path / name).write_text(message)
        (self.path.parent / "message").write_text(message + "\n")
        self.git("add", name)
        self.git("commit", "-q", "-F", str(self.path.parent / "message"))
        return self.git("rev-parse", "--short", "HEAD")

    def check(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *args],
            cwd=cwd or self.path, env=self.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    require(shutil.which("git") is not None, "needs git")
    return Repo(tmp_path)


def test_a_range_names_each_offending_commit_once_and_fails(repo: Repo) -> None:
    base = repo.commit("Start")
    good = repo.commit(f"{GOOD}\n\nA body after a blank line, as long as it likes: {'x' * 100}")
    long = repo.commit(LONG.strip())
    no_blank = repo.commit(NO_BLANK)
    repo.git("checkout", "-q", "-b", "side", good)
    repo.commit("Side")
    repo.git("checkout", "-q", "main")
    merge = "Merge branch 'side', a subject over 72 characters that is not checked, as merges are skipped"
    repo.git("merge", "-q", "--no-ff", "-m", merge, "side")

    done = repo.check("--range", f"{base}..HEAD")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout  # the good commit, the side branch's and the merge are not named
    assert lines[0].split()[:2] == [long, str(len(LONG.strip()))] and LONG.strip() in lines[0]
    assert lines[1].split()[:2] == [no_blank, "15"] and "no blank line" in lines[1]
    assert "4 commit(s) checked" in done.stderr  # good, long, no_blank, Side; the merge skipped, the base excluded

    done = repo.check("--range", f"{base}..{good}")
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_the_default_range_starts_at_the_newest_v_tag(repo: Repo) -> None:
    repo.commit(LONG.strip())  # before the release: not checked
    repo.git("tag", "-a", "v0.1", "-m", "release 0.1")
    repo.commit(GOOD)
    done = repo.check("--range")
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    assert "since tag v0.1" in done.stderr and "1 commit(s) checked" in done.stderr

    bad = repo.commit(NO_BLANK)
    done = repo.check("--range")
    assert done.returncode == 1 and done.stdout.startswith(f"{bad}  15 "), done.stdout


def test_a_shallow_clone_without_the_base_checks_what_it_holds_and_says_so(repo: Repo, tmp_path: Path) -> None:
    repo.commit(LONG.strip())
    repo.commit(GOOD)
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{repo.path}", str(clone)],
        env=repo.env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    done = repo.check("--range", cwd=clone)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    assert "shallow clone" in done.stderr and "1 commit(s) checked" in done.stderr


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (f"{GOOD}\n\nBody.\n", 0),
        (f"{GOOD}\n", 0),
        (f"{GOOD}\n# Please enter the commit message for your changes.\n#\n", 0),  # git's comments are not the body
        (f"\n\n{GOOD}\n\nBody.\n# ------------------------ >8 ------------------------\n{'x' * 100}\n", 0),
        (f"{LONG.strip()}\n\nBody.\n", 1),
        (f"{NO_BLANK}\n", 1),
        (f"{GOOD}\n# a comment between\nBody.\n", 1),  # git removes the comment: no blank line is left
    ],
    ids=["body", "subject only", "comments", "verbose diff", "long subject", "no blank line", "comment no blank"],
)
def test_as_a_commit_msg_hook(tmp_path: Path, message: str, code: int) -> None:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stdout + done.stderr
    assert (done.stdout == "") == (code == 0), done.stdout


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    for args in ([], ["--range", "a..b", "extra"], [str(tmp_path / "missing")]):
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
