"""A click group whose subcommands are imported only when they run.

Why: the analytics, dashboard and exporter commands import PySpark, Streamlit and the
OpenTelemetry SDK. Importing them at start-up made every `rocketscope` call take about a
second and made `rocketscope namesrv --help` fail on a broker-only install (no PySpark).
Each lazy subcommand is named by ``"module:attribute"`` with its one-line help kept here, so
`rocketscope --help` lists every command without importing any of them; a command whose
optional packages are missing says which extra to install instead of printing a traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import click


class LazyGroup(click.Group):
    """Eagerly defined commands plus ``lazy_subcommands``: name -> ("module:attr", short help[, extra])."""

    def __init__(self, *args: object, lazy_subcommands: dict[str, tuple[str, ...]] | None = None,
                 before_import: Callable[[str], object] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy_subcommands = dict(lazy_subcommands or {})
        self.before_import = before_import  # called with the command's name just before its module is imported

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands and cmd_name not in self.commands:
            target, _, *extra = self.lazy_subcommands[cmd_name]
            module_name, _, attribute = target.partition(":")
            if self.before_import is not None:
                self.before_import(cmd_name)
            try:
                command = getattr(importlib.import_module(module_name), attribute)
            except ModuleNotFoundError as exc:
                if not extra or (exc.name or "").startswith("rocketscope"):
                    raise
                raise click.ClickException(f"'{cmd_name}' needs the package {exc.name!r}, which is not installed: "
                                           f"pip install 'rocketscope[{extra[0]}]'") from exc
            if not isinstance(command, click.Command):
                raise TypeError(f"{target} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List commands with their help, importing none of the lazy ones."""
        rows: list[tuple[str, str]] = []
        limit = formatter.width - 6 - max((len(n) for n in self.list_commands(ctx)), default=0)
        for name in self.list_commands(ctx):
            if name in self.commands:
                cmd = self.commands[name]
                if cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(limit)))
            else:
                rows.append((name, self.lazy_subcommands[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
