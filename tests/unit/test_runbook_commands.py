"""Every command a runbook shows exists with the flags it shows (issue 20, item 8), and every runbook opens with
the state it starts from.

Each ``brook ...`` line of a runbook's ``sh`` blocks is parsed by the CLI itself (Click's ``make_context``:
the sub-commands, the options, the arguments; nothing runs), with ``<placeholders>``, ``$VARS`` and ``$(...)``
standing for a value; each ``brook ...`` in the text (inline code) names sub-commands and options that exist.
Each ``dagster ...`` line names a sub-command and flags the ``dagster`` CLI has, and the job, schedule, sensor
or asset it names is one of ``assets.definitions``. The runbooks that need a real cluster (deploy, multi-host,
rotate-credentials) are checked only this way; the others also run on the embedded broker
(``tests/e2e/test_runbook_states.py``, ``tests/e2e/test_runbooks_on_broker.py`` and the tests each runbook
names).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import typer
from typer import _click as typer_click  # typer >= 0.17 carries its own copy of Click

from streaming.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = sorted(path for path in (ROOT / "platform" / "runbooks").glob("*.md") if path.name != "README.md")
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`((?:\.venv/bin/)?(?:brook|dagster) [^`]+)`")
# A command's start inside a shell line: at the line's start or after a separator, perhaps with a path.
COMMAND = re.compile(r"(?:^\s*|[(;|&]\s*)(?:\w+=\S*\s+)*(?:[\w./-]*/)?(brook|dagster)\s+([^|;&#)]*)")
STARTING_STATE = "## Starting state"


def blocks(text: str) -> list[str]:
    return [match.group(3) for match in FENCE.finditer(text) if match.group(2) in ("sh", "bash", "")]


def command_lines(path: Path) -> list[tuple[str, list[str]]]:
    """Each ``brook``/``dagster`` command of the runbook's shell blocks: (program, its words)."""
    found = []
    for block in blocks(path.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            if line.lstrip().startswith("#"):
                continue
            for match in COMMAND.finditer(line):
                found.append((match.group(1), words(match.group(2))))
    return found


def words(text: str) -> list[str]:
    text = re.sub(r"\$\([^)]*\)?", "VALUE", text)  # $(date -u +%F) and the like
    text = re.sub(r"<[^>]+>", "VALUE", text)
    text = re.sub(r"\$\{?\w+\}?", "VALUE", text)
    return [word for word in shlex.split(text.replace("...", " ")) if word]


BROOK = typer.main.get_command(app)


def brook_parse(argv: list[str], strict: bool) -> str | None:
    """None if ``brook argv`` parses; else what is wrong."""
    command = BROOK
    path = ["brook"]
    while hasattr(command, "get_command"):  # a group
        if not argv or argv[0].startswith("-"):
            return None if not strict else f"{' '.join(path)}: no sub-command"
        name, argv = argv[0], argv[1:]
        sub = command.get_command(command.context_class(command), name)
        if sub is None:
            return f"{' '.join(path)} has no command {name!r}"
        command, path = sub, [*path, name]
    if not strict:
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        unknown = [word.split("=")[0] for word in argv if word.startswith("-") and word.split("=")[0] not in known]
        return f"{' '.join(path)} has no option {unknown}" if unknown else None
    try:
        command.make_context(" ".join(path), list(argv), resilient_parsing=False)
    except typer_click.ClickException as exc:
        if isinstance(exc, typer_click.exceptions.BadParameter) and "does not exist" in exc.format_message():
            return None  # a file of the reader's (a production config): its flag is right
        return f"{' '.join(path)} {' '.join(argv)}: {exc.format_message()}"
    return None


@pytest.mark.parametrize("path", RUNBOOKS, ids=lambda path: path.name)
def test_the_brook_commands_parse(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    wrong = [problem for program, argv in command_lines(path) if program == "brook"
             if (problem := brook_parse(argv, strict=True))]
    for span in INLINE.findall(path.read_text()):
        program, *argv = words(span.removeprefix(".venv/bin/"))
        if program == "brook" and (problem := brook_parse(argv, strict=False)):
            wrong.append(f"`{span}`: {problem}")
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def definitions():
    from assets.definitions import defs

    return defs


@pytest.fixture(scope="module")
def dagster_cli() -> click.Group:
    from dagster._cli import cli

    return cli


def dagster_problem(argv: list[str], cli: click.Group, defs) -> str | None:
    group, argv = cli, list(argv)
    path = ["dagster"]
    while isinstance(group, click.Group):
        name, argv = argv[0], argv[1:]
        sub = group.get_command(click.Context(group), name)
        if sub is None:
            return f"{' '.join(path)} has no command {name!r}"
        group, path = sub, [*path, name]
    known = {opt for param in group.params for opt in (*param.opts, *param.secondary_opts)}
    unknown = [word for word in argv if word.startswith("-") and word.split("=")[0] not in known]
    if unknown:
        return f"{' '.join(path)} has no option {unknown}"
    names = {
        "job": {job.name for job in defs.jobs},
        "schedule": {schedule.name for schedule in defs.schedules},
        "sensor": {sensor.name for sensor in defs.sensors},
        "asset": {spec.key.to_user_string() for spec in defs.resolve_all_asset_specs()},
    }[path[1]]
    if path[1] == "asset":
        selected = argv[argv.index("--select") + 1].split(",") if "--select" in argv else []
    elif path[1] == "job":
        selected = [argv[argv.index("-j") + 1]] if "-j" in argv else []
    else:
        selected = [word for word in argv if not word.startswith("-") and word not in ("VALUE", "workspace.yaml",
                                                                                         "assets.definitions")][:1]
    missing = [name for name in selected if name not in names and "VALUE" not in name]
    return f"{' '.join(path)}: no {path[1]} {missing}" if missing else None


@pytest.mark.parametrize("path", RUNBOOKS, ids=lambda path: path.name)
def test_the_dagster_commands_name_what_exists(path: Path, dagster_cli: click.Group, definitions) -> None:
    wrong = [f"{' '.join(argv)}: {problem}" for program, argv in command_lines(path)
             if program == "dagster" and argv and argv[0] in ("asset", "job", "schedule", "sensor")
             if (problem := dagster_problem(argv, dagster_cli, definitions))]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", RUNBOOKS, ids=lambda path: path.name)
def test_each_runbook_says_what_it_starts_from(path: Path) -> None:
    """A "Starting state" section (the archive runbook's is "Start here", which the compaction runbook's "Run it"
    names), saying how to make the state or naming it, and how the tests run the page (or that they do not)."""
    heading = {"archive-and-quality.md": "## Start here", "compaction.md": "## Run it"}.get(path.name, STARTING_STATE)
    text = path.read_text()
    assert heading in text, f"{path.name}: no '{heading}' section"
    start = text.split(heading, 1)[1].split("\n## ", 1)[0]
    assert "tests/" in start or "not run" in start, f"{path.name}: its starting state does not say how it is tested"


REPO_PATH = re.compile(r"\b(?:tests|bench|apps|platform|docs|streaming|assets)/[\w./-]+\.(?:py|yaml|md|conf|json)\b")
WRITTEN_BY_THE_READER = {"apps/orders/config.prod.yaml"}  # deploy.md step 1.2: the production config file


@pytest.mark.parametrize("path", RUNBOOKS, ids=lambda path: path.name)
def test_the_files_a_runbook_names_exist(path: Path) -> None:
    missing = sorted({name for name in REPO_PATH.findall(path.read_text())
                      if name not in WRITTEN_BY_THE_READER and not (ROOT / name).exists()})
    assert not missing, missing


def test_the_orders_state_creates_every_topic_the_orders_app_reads_and_writes() -> None:
    """dead-letters.md's starting state (reused by idle-source.md and exactly-once.md) creates the orders app's
    topics; one missing would stop the worker at start-up, or at the first line routed to its category."""
    from apps.orders.pipeline import ITEMS_TOPIC, ORDERS_TOPIC, OUTPUT_TOPICS, USERS_TOPIC

    text = (ROOT / "platform" / "runbooks" / "dead-letters.md").read_text()
    loop = re.search(r"for topic in (.*?); do", text.replace("\\\n", " "), re.DOTALL)
    assert loop is not None
    assert set(loop.group(1).split()) == {ORDERS_TOPIC, USERS_TOPIC, ITEMS_TOPIC, *OUTPUT_TOPICS}
