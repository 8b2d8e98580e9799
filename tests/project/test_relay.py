"""The benchmarks' delaying relay, in front of moto's S3 server, both in processes of their own."""

from __future__ import annotations

import time

import lance

from benchmarks.harness.s3 import BUCKET, running_store
from benchmarks.harness.tables import wide_chunk


def test_the_relay_passes_reads_through_delays_and_counts_them(tmp_path):
    with running_store(str(tmp_path / "server.log")) as store:
        uri = f"s3://{BUCKET}/t.lance"
        written = wide_chunk(0, 3000)
        direct = store.options(relayed=False)
        lance.write_dataset(written, uri, max_rows_per_file=1000, storage_options=direct)
        assert store.stats()["requests"] == 0, "writes went straight to the server"
        relayed = store.options(relayed=True)
        assert lance.dataset(uri, storage_options=relayed).to_table().equals(written)
        counts = store.stats()
        assert counts["requests"] == sum(counts["methods"].values()) > 0 and "GET" in counts["methods"]
        assert counts["response_bytes"] >= written.nbytes * 0.9 and counts["max_in_flight"] >= 1
        assert counts["mean_in_flight"] >= 1 and counts["in_flight"] == 0

        store.reset()
        store.set_delay(200)
        start = time.perf_counter()
        fragment = lance.dataset(uri, storage_options=relayed).get_fragments()[0]
        assert fragment.take([5, 6]).column("id").to_pylist() == [5, 6]
        took = time.perf_counter() - start
        counts = store.stats()
        assert counts["delay_ms"] == 200 and counts["requests"] >= 2
        assert took >= 0.2 * 2, "opening the table and reading rows are at least two round trips"
