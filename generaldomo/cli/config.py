"""Settings from a configuration file and the environment: ``--config PATH``, ``GENERALDOMO_*``, ``--print-config``.

This module owns where a configurable command's settings come from, and in which order: the command line's
flags, else the ``GENERALDOMO_*`` environment variables, else the TOML file of ``--config`` (or
``$GENERALDOMO_CONFIG``), else the defaults. Every option of the command's parser is a setting but those the
command lists as ``per_run`` and its positionals: its configuration key is the option's destination (for the
knobs of :mod:`generaldomo.sansio.config.knobs`, the knob's name), its variable ``GENERALDOMO_`` and the key in
capitals (or the older names of :data:`generaldomo.cli.options.VARIABLES`, which the code that
uses those options reads itself: they are checked and shown here, and a file's value gives way to them). A
value from the file or the environment goes through the option's own type and choices, so it is checked as a
flag is; a bad one is a :class:`~generaldomo.errors.SettingsError` naming its source (``FILE:[TABLE] KEY`` or
the variable).

The file: top-level keys apply to every configurable command that has the setting (others ignore them); a table
named after a command (``[broker]``, ``[worker]``, ``[client]``) applies to that command only and wins over the
top-level keys. Keys may be written with ``_`` or ``-``. A list option takes a TOML list (or one string), in a
variable items separated by spaces (shell quoting); one whose type has a ``from_table`` (``--flow``) also takes
a table. ``none`` lifts a limit that may be lifted, ``auto`` asks for a default worked out from other settings.
It knows nothing of what any one command does with its settings.
"""

from __future__ import annotations

import argparse
import difflib
import json
import shlex
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from generaldomo.cli.options import SECRETS, VARIABLES
from generaldomo.errors import SettingsError
from generaldomo.io import files
from generaldomo.sansio.config import knobs

__all__ = [
    "CONFIG_FILE",
    "CONFIG_VARIABLE",
    "Option",
    "Resolved",
    "arguments",
    "config_path",
    "convert",
    "file_values",
    "missing",
    "options_of",
    "read_file",
    "render",
    "resolve",
    "table",
]

CONFIG_VARIABLE = "GENERALDOMO_CONFIG"
CONFIG_FILE = files.FileKind("configuration file", 1024 * 1024)  # a configuration of a few hundred lines is 10 KiB
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
_NOT_SETTINGS = {"help", "more_verbose", "log_format", "log_file", "config", "print_config", "version"}
_KNOBS = knobs.by_name((*knobs.SETTINGS, *knobs.PEER))
_NUMBERS = knobs.by_name((*knobs.SETTINGS, *knobs.PEER, *knobs.COMMAND))  # every number's knob, for its bounds


@attrs.frozen
class Option:
    """One setting of a command: its key, the flag and variable that set it, and the parser's actions for it."""

    key: str
    flag: str
    variable: str
    actions: tuple[argparse.Action, ...]
    reads_variable: bool = False  # the option's own code reads the variable (an older one): it is left to it
    secret: bool = False  # a secret, or the path of a file holding one: an error never shows its value

    @property
    def action(self) -> argparse.Action:
        """The action that reads a value (of several that share the key, e.g. ``--json`` and ``--serializer``)."""
        return _reading(self.actions)

    @property
    def help(self) -> str:
        knob = _KNOBS.get(self.key)
        return knob.help if knob is not None else (self.action.help or "").replace("%%", "%")

    @property
    def listed(self) -> bool:
        """True for an option given several times (its value is a list)."""
        return isinstance(self.action, argparse._AppendAction)  # argparse has no public name for it


@attrs.frozen
class Resolved:
    """A setting's value in force and where it came from (``default``, ``flag --x``, the variable, ``FILE:KEY``)."""

    option: Option
    value: Any
    source: str


def options_of(parser: argparse.ArgumentParser, per_run: Iterable[str] = ()) -> list[Option]:
    """The settings of a command's parser, in its order (see the module docstring)."""
    by_key: dict[str, list[argparse.Action]] = {}
    skipped = _NOT_SETTINGS | set(per_run)
    for action in parser._actions:  # argparse keeps its actions there; it has no public listing of them
        if action.option_strings and action.dest not in skipped and not isinstance(action, argparse._CountAction):
            by_key.setdefault(action.dest, []).append(action)
    found = []
    for key, actions in by_key.items():
        variable = VARIABLES.get(key, knobs.ENV_PREFIX + key.upper())  # a knob's: Knob.variable, the same rule
        flag = next(s for s in _reading(actions).option_strings if s.startswith("--"))
        secret = key in SECRETS
        found.append(Option(key, flag, variable, tuple(actions), reads_variable=key in VARIABLES, secret=secret))
    return found


def _reading(actions: Sequence[argparse.Action]) -> argparse.Action:
    return next((action for action in actions if action.nargs != 0), actions[0])


def read_file(path: str) -> dict[str, Any]:
    """The TOML file at ``path``; SettingsError if it cannot be read or parsed."""
    try:
        return tomllib.loads(files.read(path, CONFIG_FILE).decode("utf-8"))
    except UnicodeDecodeError:
        raise SettingsError(f"{path}: not a TOML file (not UTF-8 text)") from None
    except OSError as error:
        raise SettingsError(f"cannot read the configuration file {path}: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{path}: not a TOML file: {error}") from None
    except RecursionError:  # tomllib reads nested arrays and inline tables recursively
        raise SettingsError(f"{path}: not a TOML file this reads: values nested too deeply") from None


def file_values(
    path: str, data: Mapping[str, Any], command: str, options: Sequence[Option], known: Mapping[str, set[str]]
) -> dict[str, tuple[Any, str]]:
    """The values the file gives ``command``'s options, each with its source ``PATH:KEY``; ``known``: every
    configurable command's keys, so that a key none of them has is an error (a misspelling), not ignored."""
    keys = {option.key for option in options}
    everybody = set().union(*known.values())
    values: dict[str, tuple[Any, str]] = {}
    for raw, value in data.items():
        key = raw.replace("-", "_")
        if isinstance(value, dict) and raw in known:
            continue  # a command's table: below
        if key not in everybody:
            near = difflib.get_close_matches(key, everybody, 1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            tables = ", ".join(f"[{name}]" for name in known)
            raise SettingsError(f"{path}: unknown setting {raw!r} ({hint}tables: {tables})")
        if key in keys:
            values[key] = (value, f"{path}:{raw}")
    table = data.get(command, {})
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: {command} must be a table ([{command}]), not {type(table).__name__}")
    for raw, value in table.items():
        key = raw.replace("-", "_")
        if key not in keys:
            near = difflib.get_close_matches(key, keys, 1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (see generaldomo {command} --print-config)"
            raise SettingsError(f"{path}: [{command}] has no setting {raw!r}{hint}")
        values[key] = (value, f"{path}:[{command}] {raw}")
    return values


def convert(option: Option, value: Any, source: str) -> Any:
    """``value`` (from a file, or a variable's text) as the option's own value, checked as its flag is."""
    action = option.action
    try:
        if action.nargs == 0:  # a switch: its value is what the flag stores (true/false)
            return _switch(value)
        from_table = getattr(action.type, "from_table", None)
        if option.listed and isinstance(value, dict) and from_table is not None:
            return from_table(value)
        if option.listed:
            items = shlex.split(value) if isinstance(value, str) and source.startswith(knobs.ENV_PREFIX) else value
            items = [items] if isinstance(items, str) else items
            if not isinstance(items, list):
                raise ValueError(f"a list (or one string) is expected, not {value!r}")
            return [_one(action, item) for item in items]
        return _one(action, value)
    except (ValueError, TypeError, argparse.ArgumentTypeError) as error:
        if option.secret:  # what is wrong, never the value
            raise SettingsError(f"{source}: a string is expected (the value is a secret: not shown)") from None
        raise SettingsError(f"{source}: {error}") from None


def _switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise ValueError(f"true or false expected, not {value!r}")


def _one(action: argparse.Action, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"a string or number is expected, not {value!r}")
    text = str(value)
    converted = action.type(text) if callable(action.type) else text
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"{text!r} is not one of {', '.join(map(str, action.choices))}")
    return converted


def resolve(
    options: Sequence[Option],
    args: argparse.Namespace,
    given: set[str],
    file: Mapping[str, tuple[Any, str]],
    environ: Mapping[str, str],
) -> list[Resolved]:
    """Each option's value in force, flags > environment > file > defaults, set on ``args`` too."""
    resolved = []
    for option in options:
        if option.key in given:
            value, source = getattr(args, option.key), f"flag {option.flag}"
        elif environ.get(option.variable):  # empty: unset, as the older variables always were
            value = convert(option, environ[option.variable], option.variable)
            source = option.variable
            if option.reads_variable:  # shown, and left to the code that reads it (and logs where it came from)
                resolved.append(Resolved(option, value, source))
                continue
        elif option.key in file:
            raw, source = file[option.key]
            value = convert(option, raw, source)
        else:
            value, source = getattr(args, option.key, None), "default"
        setattr(args, option.key, value)
        resolved.append(Resolved(option, value, source))
    return resolved


def missing(resolved: Sequence[Resolved], required: Iterable[str]) -> str:
    """What the ``required`` settings lack, as an error message (empty: nothing)."""
    needed = set(required)
    absent = [s.option for s in resolved if s.option.key in needed and s.value in (None, [])]
    if not absent:
        return ""
    shown = ", ".join(f"{o.flag} ({o.key}, {o.variable})" for o in absent)
    return f"the following settings are required: {shown}"


def config_path(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The configuration file: ``--config``, else ``$GENERALDOMO_CONFIG`` (None: no file)."""
    return getattr(args, "config", None) or environ.get(CONFIG_VARIABLE) or None


def arguments(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--print-config``."""
    parser.add_argument(
        "--config",
        metavar="PATH",
        help=f"read settings from this TOML file: top-level keys and a table named after the command; flags win "
        f"over GENERALDOMO_* variables, which win over the file (default: ${CONFIG_VARIABLE} if set)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print every setting in force and where it came from (as a file --config reads), and exit",
    )


def render(command: str, resolved: Sequence[Resolved], hidden: Iterable[str] = ()) -> str:
    """The settings as TOML for ``--config``, each with its source in a comment; unset ones commented out, and so
    are the ``hidden`` ones (secrets: whether they are set is shown, not their value)."""
    secret = set(hidden)
    lines = [
        f"# generaldomo {command}: the settings in force (flags > GENERALDOMO_* variables > --config file > defaults)",
        f"[{command}]",
    ]
    for setting in resolved:
        shown = _toml(setting.option.key, setting.value)
        key = setting.option.key
        if shown and key in secret:
            lines.append(f"# {key} is set (not shown)  # {setting.source}")
        else:
            lines.append(f"{key} = {shown}  # {setting.source}" if shown else f"# {key} is not set  # {setting.source}")
    return "\n".join(lines) + "\n"


def _toml(key: str, value: Any) -> str:
    """``value`` as a TOML value a file may give ``key`` (empty: nothing to write, the setting is unset)."""
    if value is None:
        knob = _NUMBERS.get(key)
        return json.dumps(knob.word) if knob is not None and knob.nullable else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(key, item) or '""' for item in value) + "]"
    # a TOML basic string reads JSON's escapes; DEL, which JSON leaves as it is, TOML refuses bare
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def table(commands: Mapping[str, Sequence[Option]]) -> str:
    """The guide's settings table (reStructuredText): every setting of the commands, once each, with the bounds of
    a number (its knob's: every number is finite)."""
    merged: dict[str, tuple[Option, list[str], set[str], dict[str, list[str]]]] = {}
    for command, options in commands.items():
        for option in options:
            entry = merged.setdefault(option.key, (option, [], set(), {}))
            entry[1].append(command)
            entry[2].add(_shown_default(option.action.default))
            entry[3].setdefault(option.help, []).append(command)
    rows = []
    for key, (option, users, defaults, helps) in merged.items():
        # one help, or each command's where they differ (``timeout``: the reply, the report, ...)
        told = next(iter(helps)) if len(helps) == 1 else "; ".join(f"{', '.join(c)}: {h}" for h, c in helps.items())
        knob = _NUMBERS.get(key)
        bounds = knob.bounds if knob is not None else ""
        cells = (f"``{key}``", f"``{option.flag}``", f"``{option.variable}``", ", ".join(users),
                 " / ".join(sorted(defaults)), bounds or "--", told.replace("*", r"\*").replace("`", "'"))  # fmt: skip
        rows.append("   " + ", ".join('"' + cell.replace('"', '""') + '"' for cell in cells))
    head = (
        '.. csv-table::\n   :header: "key", "flag", "variable", "commands", "default", "bounds", "what it sets"\n'
        "   :widths: 14 14 20 10 8 12 22\n\n"
    )
    return head + "\n".join(rows) + "\n"


def _shown_default(value: Any) -> str:
    if value is None or value == [] or value is False:
        return "--"
    return f"``{_toml('', value)}``"
