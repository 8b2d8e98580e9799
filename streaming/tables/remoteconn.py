"""How any process of a job opens a LanceDB server's table: ``Connection``, held in memory only.

The trainer makes one from the user's table (``remote.open_remote``) and every worker
and rank gets it in memory: lancedb's serialized connection, or the user's
``connection_factory``. Its calls to the server go through ``remoteretry.call``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.uris import kind_of
from .remoteretry import call

__all__ = ["Connection"]


@dataclass(frozen=True)
class Connection:
    """How any process of the job opens the table on the server; held in memory only.

    ``state`` is lancedb's serialized connection (database URI, API key, region,
    host override, client config); ``factory`` the user's ``connection_factory``,
    used instead when given. Neither appears in a ``repr``.
    """

    uri: str
    name: str
    state: str | None = field(default=None, repr=False)
    namespace: tuple[str, ...] = ()
    branch: str | None = None
    factory: Callable[[str], Any] | None = field(default=None, repr=False)

    @property
    def server(self) -> str:
        """The server as an error names it: its address (``host_override``), else its database
        and region (LanceDB Cloud); never the key."""
        database = self.uri.split("/")[2] if kind_of(self.uri) == "remote" else self.uri
        try:
            settings = json.loads(self.state or "{}")
        except ValueError:
            settings = {}
        if isinstance(settings, dict) and settings.get("host_override"):
            return f"{settings['host_override']} (database {database!r})"
        region = settings.get("region") if isinstance(settings, dict) else None
        return f"db://{database}" + (f" (region {region})" if region else "")

    def open(self, version: int) -> Any:
        """A new ``RemoteTable`` of this process at ``version``.

        Raises:
            SnapshotGoneError: the server no longer has ``version``.
            PermissionError: the server refused the API key.
            ValueError: the server has no such table.
        """
        return call(
            f"open table {self.uri!r} at version {version}",
            lambda: self._open(version),
            self,
            version=version,
        )

    def _open(self, version: int) -> Any:
        if self.factory is not None:
            table = self.factory(self.name)
            table.checkout(version)
            return table
        return self._database().open_table(
            self.name, namespace_path=list(self.namespace) or None, branch=self.branch, version=version
        )

    def _database(self) -> Any:
        import lancedb

        return lancedb.deserialize_conn(self.state or "", for_worker=True)

    def _newest(self) -> Any:
        if self.factory is not None:
            return self.factory(self.name)
        return self._database().open_table(self.name, namespace_path=list(self.namespace) or None)

    def latest(self) -> int:
        """The newest version of the table on the server now."""
        return int(call(f"read the version of {self.uri!r}", lambda: self._newest().version, self))

    def diagnose(self, version: int | None) -> str:
        """What a 404 meant: ``"table"`` (no such table), ``"version"`` (``version`` is gone) or ``""``."""
        try:
            table = self._newest()
        except ValueError as error:
            if "was not found" in str(error):
                return "table"
            raise
        if version is None:
            return ""
        versions = {int(entry["version"]) for entry in table.list_versions()}
        return "" if version in versions else "version"
