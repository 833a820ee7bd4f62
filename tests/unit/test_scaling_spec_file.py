"""Switching platform.yaml to a new topic generation (assets.scaling.spec_file): comments kept, every app that
uses a topic switched, declared partition counts updated, and an invalid result refused with the file unchanged."""

from pathlib import Path

import pytest

from assets.platform_spec import PlatformSpecError, load_platform_spec, repo_root
from assets.scaling.spec_file import switch_generations


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text((repo_root() / "platform" / "platform.yaml").read_text())
    return path


def test_the_switch_keeps_comments_and_moves_inputs_and_internal_topics(spec_path: Path) -> None:
    before = load_platform_spec(spec_path)
    app = next(name for name, a in before.apps.items() if "wordcount-lines" in a.inputs)
    app_id = before.apps[app].application_id
    store = before.apps[app].stores[0].name
    changelog = f"{app_id}-{store}-changelog"
    text = switch_generations(spec_path, {"wordcount-lines": (2, 8), changelog: (2, 8)})

    assert "# Brook platform spec" in text and "# -- word count" in text  # comments survive
    after = load_platform_spec(spec_path)
    assert after.topics["wordcount-lines"].partitions == 8
    assert after.apps[app].topic_generations == {"wordcount-lines": 2, changelog: 2}
    assert after.apps[app].physical_topic("wordcount-lines") == "wordcount-lines.v2"
    assert after.apps[app].physical_changelog(store) == f"{changelog}.v2"
    untouched = {name: a for name, a in after.apps.items() if name != app and "wordcount-lines" not in a.inputs}
    assert all(not a.topic_generations for a in untouched.values())
    # A second scaling moves on from there.
    switch_generations(spec_path, {"wordcount-lines": (3, 4)})
    assert load_platform_spec(spec_path).apps[app].physical_topic("wordcount-lines") == "wordcount-lines.v3"


def test_an_unknown_topic_or_an_invalid_result_leaves_the_file_as_it_was(spec_path: Path) -> None:
    original = spec_path.read_text()
    with pytest.raises(PlatformSpecError, match="no app uses topic 'nope'"):
        switch_generations(spec_path, {"nope": (2, 4)})
    with pytest.raises(PlatformSpecError):
        switch_generations(spec_path, {"wordcount-lines": (0, 4)})  # generation 0 does not validate
    assert spec_path.read_text() == original
    assert [p.name for p in spec_path.parent.iterdir()] == ["platform.yaml"]
