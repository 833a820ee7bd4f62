"""``brook topics list|create|describe|delete``: the cluster's topics (connection: see ``streaming.cli.connection``)."""

from __future__ import annotations

from typing import Annotated

import typer

from streaming.admin import create_topics, delete_topics, watermarks
from streaming.cli.connection import BootstrapOption, ConfigOption, SetOption, client_config
from streaming.naming import MAX_TOPIC_NAME_LENGTH, is_legal_topic_name
from streaming.runtime.cluster import cluster_metadata

app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, no_args_is_help=True,
                  help="List, create, describe and delete topics.")


@app.command("list")
def list_topics(bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None) -> None:
    """Every topic with its partition count."""
    metadata = cluster_metadata(client_config(bootstrap, config, overrides))
    topics = sorted((name, len(t.partitions)) for name, t in metadata.topics.items()
                    if t.error is None and not name.startswith("__"))
    width = max((len(name) for name, _ in topics), default=5)
    typer.echo(f"{'topic':<{width}}  partitions")
    for name, count in topics:
        typer.echo(f"{name:<{width}}  {count:>10}")


@app.command()
def create(
    topic: Annotated[str, typer.Argument(help="The topic's name.")],
    partitions: Annotated[int, typer.Option("--partitions", "-p", min=1, help="Number of partitions.")] = 1,
    topic_configs: Annotated[list[str] | None, typer.Option(
        "--topic-config", help="A topic config, key=value (e.g. cleanup.policy=compact).")] = None,
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Create a topic (an existing one with the same partition count is fine)."""
    if not is_legal_topic_name(topic):
        raise typer.BadParameter(f"{topic!r} is not a legal topic name: up to {MAX_TOPIC_NAME_LENGTH} letters, "
                                 f"digits, '.', '_' and '-' (and not '.' or '..')", param_hint="TOPIC")
    settings = client_config(bootstrap, config, overrides)
    configs: dict[str, str] = {}
    for item in topic_configs or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="--topic-config")
        configs[key] = value
    create_topics(settings["bootstrap.servers"], {topic: partitions}, configs={topic: configs} if configs else None,
                  client_config=settings)
    typer.echo(f"topic {topic} ready with {partitions} partitions")


@app.command()
def describe(
    topic: Annotated[str, typer.Argument(help="The topic's name.")],
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Partitions with their earliest and end offsets (ends read from fetched high watermarks)."""
    settings = client_config(bootstrap, config, overrides)
    found = cluster_metadata(settings).topics.get(topic)
    if found is None or found.error is not None:
        raise typer.BadParameter(f"topic {topic!r} does not exist on {settings['bootstrap.servers']}",
                                 param_hint="TOPIC")
    offsets = watermarks(settings["bootstrap.servers"], [(topic, p) for p in sorted(found.partitions)],
                         client_config=settings)
    typer.echo(f"topic {topic}: {len(found.partitions)} partitions, "
               f"{sum(end - start for start, end in offsets.values()):,} records")
    typer.echo("partition  earliest       end   records")
    for (_, partition), (start, end) in sorted(offsets.items()):
        typer.echo(f"{partition:>9}  {start:>8}  {end:>8}  {end - start:>8}")


@app.command()
def delete(
    topics: Annotated[list[str], typer.Argument(help="The topics to delete.")],
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Delete topics, e.g. an old topic generation after a scaling. A topic an app of the platform spec
    ($BROOK_PLATFORM_SPEC, or ./platform/platform.yaml) reads or writes now is refused."""
    settings = client_config(bootstrap, config, overrides)
    in_use = _in_use_by_the_spec()
    refused = [f"{t} ({in_use[t]})" for t in topics if t in in_use]
    if refused:
        raise typer.BadParameter(f"{', '.join(refused)}: in use now; only a generation the spec no longer names can "
                                 f"be deleted", param_hint="TOPICS")
    delete_topics(settings["bootstrap.servers"], topics, client_config=settings)
    typer.echo(f"deleted {', '.join(topics)}")


def _in_use_by_the_spec() -> dict[str, str]:
    """Physical topic -> the app of the platform spec that uses it now (empty without a spec)."""
    try:
        from assets.platform_spec import PlatformSpecError, find_spec_path, load_platform_spec
    except ImportError:  # the runtime alone: no platform spec to consult
        return {}
    path = find_spec_path()
    if not path.is_file():
        return {}
    try:
        spec = load_platform_spec(path)
    except PlatformSpecError as exc:
        raise typer.BadParameter(str(exc), param_hint="--platform-spec") from None
    used: dict[str, str] = {}
    for name, app in spec.apps.items():
        for topic in (*app.inputs, *app.outputs):
            used[app.physical_topic(topic)] = f"app {name}"
        for store in app.stores:
            used[app.physical_changelog(store.name)] = f"app {name}, store {store.name}"
    return used
