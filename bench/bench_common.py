"""What every benchmark report states about the code it measured."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git_state() -> tuple[str, bool]:
    """(short HEAD commit, whether tracked files have uncommitted changes)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return head, bool(dirty)


def commit_label() -> str:
    """"`abc1234` (clean)" or "`abc1234` (with uncommitted changes)", as the reports write it."""
    head, dirty = git_state()
    return f"`{head}` ({'with uncommitted changes' if dirty else 'clean'})"
