"""Run the documentation as a reader would: every command block, in order, in a fresh folder.

The rule, for every fenced block of README.md and docs/*.md:

* A block tagged ``python``/``py`` or ``bash``/``sh``/``shell``/``console`` is
  a command. It runs as written, in the order of its document, in one fresh
  folder per document (python blocks share one interpreter, as a reader's
  session does; bash blocks run there with ``bash -euo pipefail``), unless the
  HTML comment before it says why it cannot run here::

      <!-- run: skip (needs an OpenAI-compatible server at 127.0.0.1:8080) -->

* ``<!-- run: expect REGEX -->`` before a block: what the block prints must
  match (``re.search``, multi-line), one comment per pattern.
* Any other block must be tagged with what it is (``text``, ``sql``, ...): an
  untagged block is refused, so a command cannot hide in one.

The folder links the checkout's top-level files (``benchmarks/``, ``scripts/``,
``examples/``, ``.venv`` -> the interpreter running the tests), so a block reads
like a reader's checkout; what a block writes stays in the folder. Budgets go to
the folder's own per-user data directory (``XDG_DATA_HOME``), and the DP noise
is seeded (``sitecustomize`` seeds numpy's ``default_rng()``, which every
mechanism draws its OS-entropy generator from), so asserted answers do not
depend on the run: the settings, not the seed, make them right.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = {"python": "python", "py": "python"} | dict.fromkeys(
    ("bash", "sh", "shell", "console"), "bash"
)
_FENCE = re.compile(r"^(```+|~~~+)([^\n`]*)$")
_MARK = re.compile(r"^<!--\s*run:\s*(.*?)\s*-->$")
_LINKED = ("benchmarks", "scripts", "examples", "dprag_core", "langchain_dprag",
           "llamaindex_dprag", "docs", "README.md", "Makefile", "pyproject.toml")  # fmt: skip
MARKER = "=== docs-run block {} ==="
_STARTED = re.compile(r"=== docs-run block (\S+) ===")

SEEDING = """\
import itertools

import numpy as np

_default_rng, _seeds = np.random.default_rng, itertools.count()
np.random.default_rng = lambda seed=None: _default_rng(next(_seeds) if seed is None else seed)
"""

DRIVER = """\
import json, subprocess, sys, traceback

blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
for block in blocks:
    print("\\n" + block["marker"], flush=True)
    print(block["marker"], file=sys.stderr, flush=True)
    if block["language"] == "python":
        try:
            exec(compile(block["code"], block["name"], "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            sys.exit(3)
    else:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]])
        if done.returncode:
            print(f"{block['name']}: bash exited {done.returncode}", file=sys.stderr)
            sys.exit(3)
    sys.stdout.flush()
    sys.stderr.flush()
"""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its code and its run markers."""

    doc: str
    line: int
    language: str
    code: str
    skip: str | None = None
    expects: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def command(self) -> str | None:
        """ "python" or "bash" for a command block, else None."""
        return LANGUAGES.get(self.language)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the markdown file ``path`` with the markers above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    doc = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    found, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)))
        marks, j = [], i - 1
        while j >= 0 and (not lines[j].strip() or _MARK.match(lines[j].strip())):
            if lines[j].strip():
                marks.append(_MARK.match(lines[j].strip()).group(1))  # type: ignore[union-attr]
            j -= 1
        skip = next((m[len("skip") :].strip() for m in marks if m.startswith("skip")), None)
        expects = tuple(
            m[len("expect") :].strip() for m in reversed(marks) if m.startswith("expect")
        )
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(doc, i + 1, fence.group(2).strip(), code, skip, expects))
        i = end + 1
    return found


def documents() -> list[Path]:
    """README.md and every page of docs/, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Session:
    """What one document's run printed, per block (by marker), and how it ended."""

    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str] = field(default_factory=dict)
    failed: str | None = None


def environment(folder: Path) -> dict[str, str]:
    """A reader's shell in ``folder``: this checkout first, offline models, seeded noise,
    the folder's own data directory (budgets), no PostgreSQL DSN."""
    seeding = folder / ".seeding"
    seeding.mkdir(exist_ok=True)
    (seeding / "sitecustomize.py").write_text(SEEDING, encoding="utf-8")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DPRAG_BUDGET_DIR", "DPRAG_LEDGER_DSN", "PYTEST_CURRENT_TEST")
    }
    path = [str(ROOT), str(seeding), *filter(None, [env.get("PYTHONPATH")])]
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        XDG_DATA_HOME=str(folder / ".data"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def checkout(folder: Path) -> Path:
    """``folder``, made to look like a reader's checkout (links, and ``.venv``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in _LINKED:
        (folder / name).symlink_to(ROOT / name)
    (folder / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return folder


def run(chosen: list[Block], folder: Path, *, timeout: float = 1500) -> Session:
    """Run ``chosen`` blocks in order in ``folder`` (one interpreter for the python ones)."""
    script = [
        {"marker": MARKER.format(b.name), "language": b.command, "code": b.code, "name": b.name}
        for b in chosen
    ]
    (folder / ".blocks.json").write_text(json.dumps(script), encoding="utf-8")
    (folder / ".driver.py").write_text(DRIVER, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, ".driver.py", ".blocks.json"],
        cwd=folder,
        env=environment(folder),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    session = Session(done.returncode, done.stdout, done.stderr)
    current = None
    for line in done.stdout.splitlines():
        marked = _STARTED.fullmatch(line)
        if marked:
            if current is not None:  # the line break the driver put before the marker
                session.outputs[current] = session.outputs[current][:-1]
            current = marked.group(1)
            session.outputs[current] = ""
        elif current is not None:
            session.outputs[current] += line + "\n"
    if done.returncode:
        started = _STARTED.findall(done.stderr)
        session.failed = started[-1] if started else "(before the first block)"
    return session


def documented_commands(example: Path) -> list[str]:
    """The commands an example's docstring documents, in its order: its usage line
    (``python examples/x.py --mechanism a  # or b, c``) once per mechanism it names."""
    usage = re.search(
        r"^\s+(python \S+ --mechanism) (\w+)\s+#\s*(?:or )?([\w, ]+)$",
        example.read_text(encoding="utf-8"),
        re.M,
    )
    assert usage, f"{example.name}: no usage line 'python ... --mechanism a  # or b, c'"
    names = [usage.group(2), *re.findall(r"\w+", usage.group(3))]
    return [f"{usage.group(1)} {name}" for name in names]


def run_command(
    command: str, folder: Path, *, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """One shell command, as a reader types it, in ``folder`` (:func:`environment`)."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=folder,
        env=environment(folder),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_example_in_order(
    example: Path, folder: Path, lines: tuple[str, ...], printed: tuple[str, ...] = ()
) -> list[str]:
    """Run ``example``'s documented commands in order in ``folder``: each succeeds, each
    answer line (``lines``: ``"answer"``, ...) names the treatment that 16 records of the
    examples' corpus support, each run prints ``printed``, and no record is ever printed.
    Returns the commands."""
    from dprag_core.eval.metrics import match
    from dprag_core.eval.synthetic import make_corpus

    corpus = make_corpus(n_diseases=4, max_support=16, seed=0)
    gold = corpus.questions_of("treatment")[0]
    commands = documented_commands(example)
    for command in commands:
        done = run_command(command, folder)
        assert done.returncode == 0, f"{command}:\n{done.stderr[-3000:]}"
        for line in lines:
            said = re.search(rf"^{line}: (.*)$", done.stdout, re.M)
            assert said and match(said.group(1), gold.answer), (command, done.stdout)
        assert re.search(r"^epsilon=\d[\d.e+-]* delta=\d", done.stdout, re.M), done.stdout
        assert all(text in done.stdout for text in printed), done.stdout
        for record in corpus.records:
            assert record.text not in done.stdout and record.text not in done.stderr
    return commands


def refused_in_one_line(command: str, folder: Path) -> str:
    """Run ``command`` past its budget: exit 1, no traceback; return its one-line refusal."""
    done = run_command(command, folder)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]
