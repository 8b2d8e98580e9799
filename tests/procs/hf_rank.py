"""One rank of a Hugging Face ``Trainer`` job on CPU (gloo), launched by ``tests/jobs/test_hf_trainer.py``.

A first Trainer saves checkpoints every 5 steps and crashes after step 12; a fresh
Trainer (and model) then resumes from the last checkpoint. Each rank writes the ids
of the batches each run trained to ``OUT/<run>-<rank>.json``.
"""

from __future__ import annotations

import contextlib
import json

import rank


def main() -> None:
    args = rank.parse_with_uri()
    # what torchrun sets; the Trainer (through Accelerate) forms the gloo group from it
    rank.as_torchrun(args)
    from hf_training import Crash, CrashAfter, Recorder, arguments, trainer_class

    options = {"max_steps": 15, "save_steps": 5, "ddp_backend": "gloo"}
    make, folder = trainer_class(args.uri, 0, batch=4), args.out / "run"
    crashed, resumed = Recorder(), Recorder()
    with contextlib.suppress(Crash):
        make(model=crashed, args=arguments(folder, **options), callbacks=[CrashAfter(12)]).train()
    make(model=resumed, args=arguments(folder, **options)).train(resume_from_checkpoint=True)
    for run, model in (("first", crashed), ("second", resumed)):
        (args.out / f"{run}-{args.rank}.json").write_text(json.dumps(model.seen))
    import torch.distributed as dist

    if dist.is_initialized():  # the Trainer formed it; its gloo threads must stop before the
        dist.destroy_process_group()  # interpreter exits, or C++ aborts the process at exit


if __name__ == "__main__":
    main()
