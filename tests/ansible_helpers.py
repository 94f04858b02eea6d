"""Running the tunectl.tunectl collection's site playbook (role and modules) against localhost, and reading what it printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COLLECTION = REPO / "ansible"  # the tunectl.tunectl collection (galaxy.yml)
PLAYBOOK = COLLECTION / "playbooks" / "site.yml"
MODULES = COLLECTION / "plugins" / "modules"


def ansible_tool(name: str) -> str | None:
    """An ansible command from this interpreter's environment (scripts/bootstrap --test), else PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    return found if found and os.path.exists(found) else None


needs_ansible = pytest.mark.skipif(ansible_tool("ansible-playbook") is None,
                                   reason="ansible-playbook not installed (scripts/bootstrap --test installs it)")

_TASK = re.compile(r"^TASK \[(?P<name>[^\]]*)\]", re.MULTILINE)
_STATUS = re.compile(r"^(ok|changed|fatal|failed|skipping): \[localhost\]", re.MULTILINE)


@dataclass
class PlayRun:
    rc: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr

    def recap(self) -> dict[str, int]:
        line = re.search(r"localhost\s*:\s*(.*)", self.stdout.split("PLAY RECAP")[-1]).group(1)
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}

    def tasks(self) -> dict[str, tuple[str, str]]:
        """Task name (without the role prefix) -> (status, everything it printed)."""
        out: dict[str, tuple[str, str]] = {}
        starts = list(_TASK.finditer(self.stdout))
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(self.stdout)
            body = self.stdout[m.end():end]
            status = _STATUS.search(body)
            out[m.group("name").split(" : ", 1)[-1]] = (status.group(1) if status else "none", body)
        return out

    def task(self, prefix: str) -> tuple[str, str]:
        found = [v for k, v in self.tasks().items() if k.startswith(prefix)]
        assert len(found) == 1, f"one task named {prefix!r}* expected in:\n{self.stdout}"
        return found[0]


def tunectl_wrapper(tmp: Path) -> Path:
    """A `tunectl` that runs this checkout's package with this interpreter (PYTHONPATH set by the caller)."""
    wrapper = tmp / "bin" / "tunectl"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m tunectl \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def collections_path(tmp: Path) -> Path:
    """A collections directory in which tunectl.tunectl is this checkout's ansible/ (a symlink)."""
    root = tmp / "collections"
    link = root / "ansible_collections" / "tunectl" / "tunectl"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(COLLECTION)
    return root


def _ansible_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path(tmp)),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-local"), ANSIBLE_REMOTE_TEMP=str(tmp / "ansible-remote"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_DEPRECATION_WARNINGS="0")
    env.update(extra)
    env.pop("ANSIBLE_CONFIG", None)
    return env


def playbook(tmp: Path, extra_vars: dict, *args: str, timeout: int = 300, **env: str) -> PlayRun:
    """ansible-playbook site.yml on localhost (connection local), run from `tmp` with its own temp dirs."""
    argv = [ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(PLAYBOOK),
            "-e", json.dumps(extra_vars), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_ansible_env(tmp, **env), timeout=timeout, cwd=tmp)
    return PlayRun(proc.returncode, proc.stdout, proc.stderr)


def module_tasks(tmp: Path, tasks: list[dict], environment: dict, *args: str, timeout: int = 300) -> list[dict]:
    """One play of `tunectl` module tasks (each may fail: ignore_errors); the registered result of each, in order.

    The play names the tunectl.tunectl collection, so a task may say `tunectl` or `tunectl_info`.
    """
    out = tmp / "module-results.json"
    names = [f"tunectl_case_{i}" for i in range(len(tasks))]
    steps = [dict(t, ignore_errors=True, register=name) for t, name in zip(tasks, names)]
    steps.append({"name": "Save the results", "delegate_to": "localhost", "check_mode": False, "ansible.builtin.copy": {
        "dest": str(out), "mode": "0644", "content": "{{ [" + ", ".join(names) + "] | to_json }}"}})
    book = tmp / "module-tasks.yml"
    book.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "collections": ["tunectl.tunectl"],
                                  "environment": environment, "tasks": steps}]))
    argv = [ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(book), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_ansible_env(tmp),
                          timeout=timeout, cwd=tmp)
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    return json.loads(out.read_text())
