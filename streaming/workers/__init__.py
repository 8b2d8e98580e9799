"""The worker protocol: how one process's share of a batch is cut, sent, reported and gathered.

``side`` is the worker half both engines own (where a process stands, its
``World``; what a loader hands down; a persistent worker's reset; its reports);
``cut`` cuts a process's samples into one share per loader batch and groups a
worker's shares into DataLoader messages; ``worker`` is what runs in each worker
(the collate that finishes a share and attaches its report, the
``worker_init_fn`` wrapper); ``transfer`` and ``byvalue`` how shares travel back;
``outputs`` explains samples ``default_collate`` cannot batch; ``seeding`` notices
a seeding ``worker_init_fn``; ``shares`` gathers one share per worker for each
batch in the trainer and ``assembly`` lays them into the batch; ``board`` posts the
committed position to persistent workers; ``watchdog`` ends a worker with its
trainer; ``supervisor`` names a dead worker at once. Imports ``core``, ``tables`` and ``samples``.
"""

__all__: list[str] = []
