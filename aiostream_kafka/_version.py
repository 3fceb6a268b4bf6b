"""The one place the version lives: pyproject.toml reads it from here
([tool.setuptools.dynamic]), and so do the wheel, the sdist, ``aiostream_kafka.__version__``
and the client's ApiVersions (``client_software_version``). A module of its own, importing
nothing, so that the configuration layer can name the version without importing the
package root (whose lazy re-exports reach every client)."""

__version__ = "0.1.0.dev0"
