"""A LanceDB server's table with 0%, 1%, 10% of its rows deleted: rows/s as ratios, one run.

    python -m benchmarks remote_deletions [--rows 1000000] [--latency-ms 25] [--repeats 3] [--out F]

Writes ``--rows`` rows of (id int64, label int32, float32[128]) in 16 fragments and
serves them with the LanceDB stand-in (``streaming/testing/server.py``: its own
process, Lance's own engine, so a take costs what it costs lancedb). Deleting 1% and
then 10% of the rows (seeded, spread over every fragment) makes two more versions of the
same table, so the three cases read the same data files: version 1 (no deletions), 2
(1%) and 3 (10%), each pinned with ``version=``. Each round streams one epoch of each
version, in turn, with ``StreamingDataset(table, num_splits=16, version=v)`` and
``StreamingDataLoader(batch_size=256)`` at ``num_workers`` 0 and 2, timed end to end
(from building the dataset to the last batch: the first window, read before the first
batch, holds most of the takes); the table gives the median rows/s and its ratio to no
deletions, the median of the rounds' ratios (target at least ``RATIO_TARGET``). Also,
per version: what learning the live row ids costs (the 16 narrow queries of ``_rowid`` a
process sends once, their bytes on the wire and the runs kept in memory), and why
offsets are not taken: one take of 8,192 rows by offset and by row id. The section
between the ``remote-deletions`` markers of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.tables import TableRef, wide_chunk, write_table
from streaming.testing import LanceDBStandIn

BATCH = 256
SPLITS = 16
FRAGMENTS = 16
PAGE = 65_536
RATIO_TARGET = 0.8
SHARES = (0.0, 0.01, 0.10)
KEY = "sk-benchmark"
TAKE = 8_192


def delete_share(local: TableRef, shares: tuple[float, ...]) -> list[int]:
    """Delete a growing seeded share of the rows, one version each; the versions, oldest first."""
    import lance

    dataset = lance.dataset(local.uri)
    versions = [int(dataset.version)]
    order = np.random.default_rng(0).permutation(local.rows)
    for share in shares[1:]:
        gone = np.sort(order[: int(share * local.rows)])
        dataset.delete(f"id IN ({', '.join(map(str, gone.tolist()))})")
        versions.append(int(dataset.version))
    return versions


def epoch_rate(table: Any, version: int, workers: int, rows: int) -> float:
    """Rows/s of one whole epoch of ``version``, from building the dataset to its last batch.

    End to end on purpose: the first window (with the lancedb-server profile, up to
    256 MiB, the whole of a small table) is read before the first batch, so a rate
    after the first batch would leave most of the takes out.
    """
    from streaming import StreamingDataLoader, StreamingDataset

    start = time.perf_counter()
    dataset = StreamingDataset(table, num_splits=SPLITS, version=version)
    delivered = sum(
        len(batch["id"]) for batch in StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)
    )
    seconds = time.perf_counter() - start
    if delivered < rows * 0.8:
        raise RuntimeError(f"version {version}: {delivered} rows delivered of about {rows}")
    return delivered / seconds


def mechanism(server: LanceDBStandIn, name: str, version: int) -> dict[str, float]:
    """The row-id pages of ``version`` (seconds, bytes, runs) and one take by offset and by id."""
    table = server.connect().open_table(name, version=version)
    count = table.count_rows()
    start = time.perf_counter()
    pages = [
        table.search().select(["_rowid"]).offset(first).limit(min(PAGE, count - first)).to_arrow()
        for first in range(0, count, PAGE)
    ]
    learn = time.perf_counter() - start
    ids = [page.column("_rowid").to_numpy() for page in pages]
    runs = sum(1 + int(np.count_nonzero(np.diff(part.astype(np.int64)) != 1)) for part in ids)
    middle = count // 2
    start = time.perf_counter()
    table.take_offsets(list(range(middle, middle + TAKE))).select(["id"]).to_arrow()
    by_offset = time.perf_counter() - start
    chosen = np.concatenate(ids)[middle : middle + TAKE].tolist()
    start = time.perf_counter()
    table.take_row_ids(chosen).select(["id"]).to_arrow()
    by_id = time.perf_counter() - start
    return {"rows": count, "learn": learn, "runs": runs, "offset": by_offset, "id": by_id}


def measure(server: LanceDBStandIn, local: TableRef, versions: list[int], repeats: int) -> dict[str, Any]:
    """Rounds of one epoch per version, interleaved, at k=0 and 2; the mechanism per version."""
    table = server.connect().open_table(local.name)
    rates: dict[tuple[int, int], list[float]] = {}
    for workers in (0, 2):
        for _ in range(repeats):
            for version in versions:
                rate = epoch_rate(table, version, workers, local.rows)
                rates.setdefault((workers, version), []).append(rate)
    return {"rates": rates, "mechanism": {v: mechanism(server, local.name, v) for v in versions}}


def report(found: dict[str, Any], versions: list[int], args: argparse.Namespace) -> str:
    """The section's markdown."""
    facts = machine_facts()
    lines = [
        "## Remote tables with deleted rows",
        "",
        f"`python -m benchmarks remote_deletions --rows {args.rows} --latency-ms {args.latency_ms:g} "
        f"--repeats {args.repeats}`: {args.rows:,} rows (id, label, float32[128]) in {FRAGMENTS} "
        f"fragments, served by the LanceDB stand-in with {args.latency_ms:g} ms before every answer; "
        f"versions with 0%, 1% and 10% of the rows deleted, {args.repeats} rounds of one epoch each, "
        f"{SPLITS} splits, batches of {BATCH}; {facts['cores']} cores ({facts['cpu']}), commit "
        f"{facts.get('commit', 'unknown')}, {facts['date']}; load average {load_average()}.",
        "",
        "| deleted | k | rows/s, whole epoch (median) | ratio to 0% (median of rounds) | target |",
        "| ---: | ---: | ---: | ---: | --- |",
    ]
    rates = found["rates"]
    for workers in (0, 2):
        base = rates[(workers, versions[0])]
        for share, version in zip(SHARES, versions, strict=True):
            ratio = statistics.median(r / b for r, b in zip(rates[(workers, version)], base, strict=True))
            verdict = "-" if share == 0 else _verdict(ratio >= RATIO_TARGET)
            lines.append(
                f"| {share:.0%} | {workers} | {statistics.median(rates[(workers, version)]):,.0f} | "
                f"{ratio:.2f} | {verdict} |"
            )
    lines += [
        "",
        "| deleted | row-id queries s | bytes on the wire | runs kept | take of 8,192 by offset s "
        "| by row id s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for share, version in zip(SHARES, versions, strict=True):
        step = found["mechanism"][version]
        lines.append(
            f"| {share:.0%} | {step['learn']:.3f} | {8 * step['rows']:,.0f} | {step['runs']:,.0f} "
            f"({12 * step['runs']:,.0f} bytes) | {step['offset']:.3f} | {step['id']:.3f} |"
        )
    return "\n".join(lines)


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def main(argv: list[str] | None = None) -> None:
    """Build the table and its versions, serve it, measure, print (and with ``--out`` publish)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks remote_deletions", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        local = write_table(folder, "deleted", rows=args.rows, fragments=FRAGMENTS, chunk=wide_chunk)
        versions = delete_share(local, SHARES)
        with LanceDBStandIn(folder, api_key=KEY, latency_ms=args.latency_ms) as server:
            found = measure(server, local, versions, args.repeats)
    sections.publish(report(found, versions, args), name="remote-deletions", out=args.out)
