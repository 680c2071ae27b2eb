"""torchrun with a clean Ctrl-C: python -m <stage>.torchrun --nproc_per_node 2 -m <stage>.train

The same launcher as the ``torchrun`` command (``torch.distributed.run``, the same
arguments), with one difference. On Ctrl-C, plain torchrun passes the signal on to the
training processes, waits until they have stopped (each saves a resumable checkpoint, see
harness.py), and then ends with a traceback of its own and exit code 1, which looks like a
crash. Here it ends as one process does: the training processes say in one line where they
stopped, and the exit code is 130, the shell's code for Ctrl-C.
"""

from __future__ import annotations

import logging
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main as torchrun


def main(argv: list[str] | None = None) -> None:
    # No warnings from torchrun's own logs ("Received 2 death signal, shutting down workers").
    logging.disable(logging.WARNING)
    try:
        torchrun(argv)
    except SignalException:
        sys.exit(130)


if __name__ == "__main__":
    sys.exit(main())
