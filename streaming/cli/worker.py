"""Placeholder created by the infrastructure helper; replace with the real worker CLI."""

import typer

app = typer.Typer(help="Run stream workers.")
