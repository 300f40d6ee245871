"""Waiting for processes to end, on the kernel's word (pidfds), never for an amount of time."""

from __future__ import annotations

import select


def all_end(pidfds: list[int], timeout: float) -> bool:
    """Wait until every pidfd is readable: each process has ended (False if the time ran out first).

    A pidfd (``os.pidfd_open``) names one process for good, so a pid reused meanwhile cannot fool it,
    and it becomes readable the moment that process ends, whoever its parent is.
    """
    poll = select.poll()
    for fd in pidfds:
        poll.register(fd, select.POLLIN)
    ended: set[int] = set()
    while len(ended) < len(pidfds) and (ready := poll.poll(int(timeout * 1000))):
        for fd, _ in ready:
            ended.add(fd)
            poll.unregister(fd)
    return len(ended) == len(pidfds)
