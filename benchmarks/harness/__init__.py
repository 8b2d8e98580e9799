"""What every suite shares: timing and resources (``measure``), fresh-process runs
(``process``), machine facts (``machine``), tables to read (``tables``), the
sections of ``docs/benchmarks.md`` (``sections``), and stand-ins for remote storage:
moto's S3 server with a delaying relay (``s3``, ``relay``) and a LanceDB server
(``lancedb_server``, started by ``lancedb_stand_in``).

Imports nothing of ``benchmarks.cases`` or ``benchmarks.suites``, and nothing of
``streaming``.
"""
