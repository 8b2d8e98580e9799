"""One rank of an Accelerate job on CPU (gloo), launched by ``tests/jobs/test_accelerate.py``.

One run trains 5 steps and calls ``save_state`` (every rank writes its loader's
state to the same ``dl_state_dict.bin``); a fresh Accelerator, model and loader then
call ``load_state`` and train to the end of the epoch. Each rank writes the ids of
its batches, the splits its own state owns and those of the saved file to
``OUT/<rank>.json``.
"""

from __future__ import annotations

import json
from typing import Any

import rank


def main() -> None:
    args = rank.parse_with_uri()
    # what `accelerate launch --multi_gpu --num_processes 2` sets on a machine without GPUs
    rank.as_torchrun(args)
    import torch
    from accelerate import Accelerator

    from accelerate_training import make_loader, train

    def prepared() -> tuple[Any, ...]:
        accelerator = Accelerator(cpu=True)
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = make_loader(args.uri, 0)
        return accelerator, loader, *accelerator.prepare(model, optimizer, loader)

    folder, seen = args.out / "ckpt", []
    accelerator, loader, model, optimizer, batches = prepared()
    train(accelerator, model, optimizer, batches, seen, steps=5)
    accelerator.save_state(str(folder))
    accelerator.wait_for_everyone()
    saved = torch.load(folder / "dl_state_dict.bin", weights_only=False)
    report = {"world": accelerator.num_processes, "own": loader.state_dict()["owned_splits"]}
    report["file"] = saved["owned_splits"]
    accelerator, loader, model, optimizer, batches = prepared()  # after a crash
    accelerator.load_state(str(folder))
    train(accelerator, model, optimizer, batches, seen)
    report["seen"] = seen
    (args.out / f"{args.rank}.json").write_text(json.dumps(report))
    if torch.distributed.is_initialized():  # its gloo threads stop before the interpreter exits
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
