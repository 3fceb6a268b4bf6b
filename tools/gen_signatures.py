"""Write the clients' constructors and the typed option dictionaries from the config classes.

The options of ``Producer``, ``Consumer`` and ``Admin`` are the fields of their config
classes (``ClientConfig``, ``ProducerConfig``, ``ConsumerConfig``, ``GroupOptions``): names,
types and defaults come from the dataclasses, the descriptions and units from the tables of
``tools/gen_config_docs.py`` (which also writes docs/configuration.md from them). This
script writes whole modules of their own (no generated line sits in a hand-written one):

* ``aiostream_kafka/{producer,consumer,admin}/_generated.py``: each client's base class
  (``ProducerConstructor``, ``ConsumerConstructor``, ``AdminConstructor``) whose
  ``__init__`` has the explicit keyword parameters with their types and defaults, a
  docstring with one entry per option, and the statements that build the config objects
  from them, then calls ``self._setup(...)``: the hand-written rest of the constructor,
  which the client class (``Producer``, ``Consumer``, ``Admin``) defines;
* ``aiostream_kafka/_generated_options.py``: the ``TypedDict`` classes (``ClientOptions``,
  ``ProducerOptions``, ``ConsumerOptions``) that the FastAPI integration takes, re-exported
  by ``aiostream_kafka/options.py``.

    python tools/gen_signatures.py           # rewrite the generated modules
    python tools/gen_signatures.py --check   # exit 1 (with a diff) if one is stale

``tests/test_options.py`` runs the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from gen_config_docs import (  # noqa: E402
    CLIENT_OPTIONS,
    CONSUMER_OPTIONS,
    GROUP_OPTION_DOCS,
    PRODUCER_FROM_CLIENT,
    PRODUCER_OPTIONS,
    format_default,
)

from aiostream_kafka.config import ClientConfig  # noqa: E402
from aiostream_kafka.consumer.config import ConsumerConfig, GroupOptions  # noqa: E402
from aiostream_kafka.producer.config import ProducerConfig  # noqa: E402

WIDTH = 100


@dataclass(frozen=True)
class Option:
    name: str
    type: str
    default: Any
    unit: str
    description: str


def _options(cls: type, docs: dict[str, tuple[str, str]], skip: set[str]) -> list[Option]:
    out = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name in skip:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        else:
            raise SystemExit(f"gen_signatures: {cls.__name__}.{f.name} has no default")
        if f.name not in docs:
            raise SystemExit(f"gen_signatures: {cls.__name__}.{f.name} has no description")
        unit, description = docs[f.name]
        out.append(Option(f.name, str(f.type), default, unit, description))
    return out


def client_options() -> list[Option]:
    return _options(ClientConfig, CLIENT_OPTIONS, {"bootstrap_servers"})


def producer_options() -> list[Option]:
    return _options(ProducerConfig, PRODUCER_OPTIONS, PRODUCER_FROM_CLIENT)


def consumer_options() -> list[Option]:
    return _options(ConsumerConfig, CONSUMER_OPTIONS, set())


def group_options() -> list[Option]:
    return _options(GroupOptions, GROUP_OPTION_DOCS, set())


def literal(value: Any) -> str:
    """``value`` as ruff formats a literal (double quotes, ``_`` in large ints)."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        return f"{value:_}"
    return repr(value)


def _wrap(text: str, indent: str, hang: str) -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=hang,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _arg_doc(name: str, text: str, indent: str) -> list[str]:
    # The docs site's links are relative to its pages, not to the API reference: text only.
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
    return _wrap(f"{name}: {text}", indent, indent + "    ")


def _option_doc(option: Option, indent: str) -> list[str]:
    unit = f"{option.unit}, " if option.unit and option.unit != "count" else ""
    default = format_default(option.default, option.unit, html=False)
    text = f"{option.description} ({unit}default {default})"
    return _arg_doc(option.name, text, indent)


@dataclass(frozen=True)
class Constructor:
    """How one client's generated base class (and its ``__init__``) is written."""

    path: str  # the generated module
    client: str  # the hand-written class, a subclass of ``base``
    package: str  # where ``client`` is importable from
    base: str
    lead: list[str]  # the parameters before the options, as source lines
    lead_docs: list[tuple[str, str]]  # their docstring entries
    summary: str
    raises: list[str]
    groups: list[tuple[str, str, list[Option], list[str]]]  # (target, class, options, extra)
    prelude: list[str]  # statements after check_options, before the config objects
    hook: list[tuple[str, str]]  # (name, type) of the arguments _setup takes
    imports: list[tuple[str, str]]  # (module, name) the prelude and the groups use


def render_init(spec: Constructor) -> str:
    i1, i2, i3 = "    ", "        ", "            "
    lines = [f"{i1}def __init__(", f"{i2}self,"]
    lines += [f"{i2}{p}" for p in spec.lead]
    options = [o for _, _, opts, _ in spec.groups for o in opts]
    for o in options:
        lines.append(f"{i2}{o.name}: {o.type} = {literal(o.default)},")
    lines.append(f"{i2}**unknown: Never,")
    lines.append(f"{i1}) -> None:")
    doc = [f'{i2}"""{spec.summary}', "", f"{i2}Args:"]
    for name, text in spec.lead_docs:
        doc += _arg_doc(name, text, i3)
    for o in options:
        doc += _option_doc(o, i3)
    doc += _arg_doc(
        "**unknown",
        "not an option: a name given here raises `ConfigError` saying what to write"
        " instead (typed `Never`, so that a type checker flags it too).",
        i3,
    )
    doc += ["", f"{i2}Raises:"]
    for entry in spec.raises:
        doc += _wrap(entry, i3, i3 + "    ")
    doc.append(f'{i2}"""')
    lines += doc
    lines.append(f'{i2}check_options("{spec.client}", unknown)')
    lines += [f"{i2}{s}" for s in spec.prelude]
    for target, cls, opts, extra in spec.groups:
        lines.append(f"{i2}{target} = {cls}(")
        lines += [f"{i3}{e}," for e in extra]
        lines += [f"{i3}{o.name}={o.name}," for o in opts]
        lines.append(f"{i2})")
    lines.append(f"{i2}self._setup({', '.join(name for name, _ in spec.hook)})")
    return "\n".join(lines) + "\n"


def _imports(spec_imports: list[tuple[str, str]], types: list[str]) -> str:
    """The import block (as ruff's isort orders it) for the names the types use."""
    text = " ".join(types)
    names: dict[str, set[str]] = {}
    for module, name in spec_imports:
        names.setdefault(module, set()).add(name)
    for module, name in (
        ("typing", "Any"),
        ("typing", "Never"),
        ("collections.abc", "Callable"),
        ("collections.abc", "Mapping"),
        ("collections.abc", "Sequence"),
        ("aiostream_kafka.serde", "Deserializer"),
        ("aiostream_kafka.serde", "Serializer"),
    ):
        if re.search(rf"\b{name}\b", text):
            names.setdefault(module, set()).add(name)
    stdlib = ["import ssl"] if "ssl." in text else []
    stdlib += [
        f"from {m} import {', '.join(sorted(n))}"
        for m, n in sorted(names.items())
        if not m.startswith("aiostream_kafka")
    ]
    ours = [
        f"from {m} import {', '.join(sorted(n))}"
        for m, n in sorted(names.items())
        if m.startswith("aiostream_kafka")
    ]
    return "\n".join(stdlib) + "\n\n" + "\n".join(ours) + "\n"


_HEADER = """\
# GENERATED by tools/gen_signatures.py from the config classes: do not edit by hand; run
# `python tools/gen_signatures.py` after changing an option (tests/test_options.py checks).
"""


def render_constructor_module(spec: Constructor) -> str:
    client = f"{spec.package}.{spec.client}"
    init = render_init(spec)
    hook_params = "".join(f", {name}: {typ}" for name, typ in spec.hook)
    # The names the parameters' annotations use (not the docstring's words).
    types = [*spec.lead, "Never", hook_params]
    types += [o.type for _, _, opts, _ in spec.groups for o in opts]
    doc = (
        f'"""The generated constructor of :class:`~{client}`.\n'
        "\n"
        f"``{spec.base}.__init__`` takes every option as an explicit keyword parameter (its\n"
        "type, default and description, from the config classes), checks the names given,\n"
        "builds the config objects, then calls ``self._setup(...)``: the rest of the\n"
        f"constructor, which ``{spec.client}`` (hand-written, a subclass of this class) defines.\n"
        '"""\n'
    )
    body = [
        _HEADER + doc,
        "from __future__ import annotations\n",
        _imports(spec.imports, types),
        f'__all__ = ["{spec.base}"]\n\n',
        f"class {spec.base}:\n"
        f'    """The generated part of :class:`~{client}`: its ``__init__``."""\n',
        init,
        f"    def _setup(self{hook_params}) -> None:\n"
        f'        """The rest of the constructor, run last: ``{spec.client}`` defines it."""\n'
        "        raise NotImplementedError\n",
    ]
    return "\n".join(body)


def constructors() -> list[Constructor]:
    client = client_options()
    config_raises = [
        "ConfigError: an unknown option, an invalid value or two options that contradict"
        " each other, before any network I/O.",
    ]
    bootstrap_doc = (
        "bootstrap_servers",
        CLIENT_OPTIONS["bootstrap_servers"][1] + " (required)",
    )
    options_import = ("aiostream_kafka.options", "check_options")
    client_import = ("aiostream_kafka.config", "ClientConfig")
    return [
        Constructor(
            path="aiostream_kafka/producer/_generated.py",
            client="Producer",
            package="aiostream_kafka.producer",
            base="ProducerConstructor",
            lead=["bootstrap_servers: str | Sequence[str],", "*,"],
            lead_docs=[bootstrap_doc],
            summary="Create a producer; it connects in :meth:`start` (or ``async with``).",
            raises=config_raises,
            groups=[
                (
                    "self.client_config",
                    "ClientConfig",
                    client,
                    ["bootstrap_servers=bootstrap_servers"],
                ),
                (
                    "self.config",
                    "ProducerConfig",
                    producer_options(),
                    ["request_timeout_ms=request_timeout_ms"],
                ),
            ],
            prelude=[],
            hook=[],
            imports=[
                client_import,
                options_import,
                ("aiostream_kafka.producer.config", "ProducerConfig"),
            ],
        ),
        Constructor(
            path="aiostream_kafka/consumer/_generated.py",
            client="Consumer",
            package="aiostream_kafka.consumer",
            base="ConsumerConstructor",
            lead=["*topics: str,", "bootstrap_servers: str | Sequence[str] | None = None,"],
            lead_docs=[
                (
                    "*topics",
                    "topics to subscribe to when the consumer starts (aiokafka's habit):"
                    " with a `group_id` the group assigns their partitions; without one"
                    " every partition of each topic is assigned. When `bootstrap_servers`"
                    " is not given by name, the first positional argument is it"
                    " (`Consumer(bootstrap_servers, ...)`), and the topics follow it.",
                ),
                bootstrap_doc,
            ],
            summary="Create a consumer; it connects in :meth:`start` (or ``async with``).",
            raises=[
                *config_raises,
                "ConfigError: no `bootstrap_servers`; a group option changed from its default"
                " without a `group_id`.",
            ],
            groups=[
                (
                    "self.client_config",
                    "ClientConfig",
                    client,
                    ["bootstrap_servers=bootstrap_servers"],
                ),
                ("self.config", "ConsumerConfig", consumer_options(), []),
                ("group_options", "GroupOptions", group_options(), []),
            ],
            prelude=["bootstrap_servers, self._topics = split_topics(topics, bootstrap_servers)"],
            hook=[("group_options", "GroupOptions")],
            imports=[
                client_import,
                options_import,
                ("aiostream_kafka.consumer.config", "ConsumerConfig"),
                ("aiostream_kafka.consumer.config", "GroupOptions"),
                ("aiostream_kafka.consumer.config", "split_topics"),
            ],
        ),
        Constructor(
            path="aiostream_kafka/admin/_generated.py",
            client="Admin",
            package="aiostream_kafka.admin",
            base="AdminConstructor",
            lead=["bootstrap_servers: str | Sequence[str],", "*,"],
            lead_docs=[bootstrap_doc],
            summary="Create an admin client; it connects in :meth:`start` (or ``async with``).",
            raises=config_raises,
            groups=[
                (
                    "self.config",
                    "ClientConfig",
                    client,
                    ["bootstrap_servers=bootstrap_servers"],
                ),
            ],
            prelude=[],
            hook=[],
            imports=[client_import, options_import],
        ),
    ]


TYPEDDICTS_PATH = "aiostream_kafka/_generated_options.py"


def render_typeddicts() -> str:
    client = client_options()
    consumer = [o for o in consumer_options() if o.name != "group_id"] + group_options()
    parts = []
    types = []
    for name, what, options in (
        ("ClientOptions", "The options every client takes (but `bootstrap_servers`).", client),
        (
            "ProducerOptions",
            "The keyword options of `Producer` (but `bootstrap_servers`).",
            client + producer_options(),
        ),
        (
            "ConsumerOptions",
            "The keyword options of `Consumer` (but `bootstrap_servers` and `group_id`).",
            client + consumer,
        ),
    ):
        lines = [f"class {name}(TypedDict, total=False):", f'    """{what}"""', ""]
        for o in options:
            lines.append(f"    {o.name}: {o.type}")
            types.append(o.type)
        parts.append("\n".join(lines) + "\n")
    doc = (
        '"""The clients\' keyword options as ``TypedDict`` classes, generated from the config\n'
        "classes, for code that passes options around as a mapping (the FastAPI integration's\n"
        "``client_options``, ``producer_options`` and ``consumer_options``). Import them from\n"
        ":mod:`aiostream_kafka.options`.\n"
        '"""\n'
    )
    return "\n".join(
        [
            _HEADER + doc,
            "from __future__ import annotations\n",
            _imports([("typing", "TypedDict")], types),
            '__all__ = ["ClientOptions", "ConsumerOptions", "ProducerOptions"]\n\n',
            "\n\n".join(parts),
        ]
    )


def outputs() -> dict[Path, str]:
    """Path -> the text of each generated module."""
    out = {ROOT / spec.path: render_constructor_module(spec) for spec in constructors()}
    out[ROOT / TYPEDDICTS_PATH] = render_typeddicts()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a generated module is stale"
    )
    args = parser.parse_args(argv)
    stale = 0
    for path, text in outputs().items():
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == text:
            continue
        if args.check:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    str(path.relative_to(ROOT)),
                    "generated",
                )
            )
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"\n{stale} file(s) stale: run python tools/gen_signatures.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
