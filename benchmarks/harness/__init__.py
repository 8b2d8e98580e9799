"""What every suite shares: timing and resources (``measure``), fresh-process runs
(``process``), machine facts (``machine``), tables to read (``tables``), the
sections of ``docs/benchmarks.md`` (``sections``), and a stand-in for object storage:
moto's S3 server with a delaying relay (``s3``, ``relay``). The LanceDB server stand-in
is the package's testing helper, ``streaming.testing.LanceDBStandIn``: the suites that
use it (``suites/remote_*``) import it from there.

Imports nothing of ``benchmarks.cases`` or ``benchmarks.suites``, and nothing of
``streaming``.
"""
