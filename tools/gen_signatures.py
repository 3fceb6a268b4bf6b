"""Write the clients' constructors and the typed option dictionaries from the config classes.

The options of ``Producer``, ``Consumer`` and ``Admin`` are the fields of their config
classes (``ClientConfig``, ``ProducerConfig``, ``ConsumerConfig``, ``GroupOptions``): names,
types and defaults come from the dataclasses, the descriptions and units from the tables of
``tools/gen_config_docs.py`` (which also writes docs/configuration.md from them). This
script writes, between ``# BEGIN GENERATED`` and ``# END GENERATED`` marker lines:

* each client's ``__init__``: its explicit keyword parameters with their types and
  defaults, a docstring with one entry per option, and the statements that build the
  config objects from them;
* the ``TypedDict`` classes of ``aiostream_kafka/options.py`` (``ClientOptions``,
  ``ProducerOptions``, ``ConsumerOptions``) that the FastAPI integration takes.

    python tools/gen_signatures.py           # rewrite the generated blocks
    python tools/gen_signatures.py --check   # exit 1 (with a diff) if one is stale

``tests/test_config_signatures.py`` runs the check.
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
    """How one class's ``__init__`` is written."""

    path: str
    client: str
    lead: list[str]  # the parameters before the options, as source lines
    lead_docs: list[tuple[str, str]]  # their docstring entries
    summary: str
    raises: list[str]
    groups: list[tuple[str, str, list[Option], list[str]]]  # (target, class, options, extra)
    prelude: list[str]  # statements after check_options, before the config objects


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
    return "\n".join(lines) + "\n"


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
    return [
        Constructor(
            path="aiostream_kafka/producer/producer.py",
            client="Producer",
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
        ),
        Constructor(
            path="aiostream_kafka/consumer/consumer.py",
            client="Consumer",
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
            prelude=["bootstrap_servers, self._topics = _split_topics(topics, bootstrap_servers)"],
        ),
        Constructor(
            path="aiostream_kafka/admin/client.py",
            client="Admin",
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
        ),
    ]


def render_typeddicts() -> str:
    client = client_options()
    consumer = [o for o in consumer_options() if o.name != "group_id"] + group_options()
    parts = []
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
        parts.append("\n".join(lines) + "\n")
    return "\n\n".join(parts)


def _marker(tag: str) -> tuple[str, str]:
    return (
        f"# BEGIN GENERATED {tag} (tools/gen_signatures.py; do not edit by hand)",
        f"# END GENERATED {tag}",
    )


def replace_block(text: str, tag: str, body: str, indent: str, path: str) -> str:
    begin, end = _marker(tag)
    lines = text.splitlines(keepends=True)
    starts = [n for n, line in enumerate(lines) if line.strip() == begin]
    ends = [n for n, line in enumerate(lines) if line.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SystemExit(f"gen_signatures: {path} needs one '{begin}' and one '{end}' line")
    return "".join(lines[: starts[0] + 1]) + body + "".join(lines[ends[0] :])


def outputs() -> dict[Path, str]:
    """Path -> its text with the generated blocks written."""
    out: dict[Path, str] = {}

    def update(path: str, tag: str, body: str, indent: str) -> None:
        file = ROOT / path
        current = out.get(file) or file.read_text(encoding="utf-8")
        out[file] = replace_block(current, tag, body, indent, path)

    for spec in constructors():
        update(spec.path, "__init__", render_init(spec), "    ")
    update("aiostream_kafka/options.py", "TYPEDDICTS", "\n\n" + render_typeddicts() + "\n\n", "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale")
    args = parser.parse_args(argv)
    stale = 0
    for path, text in outputs().items():
        current = path.read_text(encoding="utf-8")
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
