"""A minimal torchrun: start one command per rank, record their pids and exit codes.

Run by the campaign in a new session, so ``os.killpg`` of this process's group
reaches every rank and every DataLoader worker. Usage:
``chaos_launch.py PIDS_FILE RC_FILE COMMANDS_JSON``; rank 0 keeps this process's
stdout, the other ranks write theirs next to the pid file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    pids_file, rc_file, commands = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
    processes = []
    for rank, command in enumerate(commands):
        if rank == 0:  # its stdout is the campaign's view of the job, its stderr the launcher's
            processes.append(subprocess.Popen(command))
            continue
        output = (pids_file.parent / f"{pids_file.stem}-rank{rank}.out").open("w")
        processes.append(subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT))
    partial = pids_file.with_name(pids_file.name + ".partial")
    partial.write_text(json.dumps([process.pid for process in processes]))
    os.replace(partial, pids_file)
    codes = [process.wait() for process in processes]
    rc_file.write_text(json.dumps(codes))


if __name__ == "__main__":
    main()
