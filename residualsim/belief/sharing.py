"""The belief steps' particles shared between the workers.

Both belief steps hand every worker the same request (all the particles' states) and each
runs its share. In batched worlds the share is taken as the worker's copies free up
(:class:`~residualsim.parallel.claims.WorkClaims`), so that the workers finish together:
split in advance (every k-th particle to worker k), the two workers of ``bench beliefs``
ended 0.2-0.5 s apart over its 12 steps, claimed 0.12-0.16 s (train/README.md §10). One
particle's run does not depend on which worker or world it shares, so the results are the
same either way, bit for bit. One at a time (the lone path) and on a pool across machines
the share stays every k-th particle; a particle taken by a worker that died is run again,
split that way.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["slot_indices", "lone_share", "map_shared", "batched_first_events"]


def slot_indices(slot: int, request) -> list[int]:
    """The particles worker ``slot`` runs when the work is split in advance: every
    ``request.n_slots``-th of ``request.only`` (the particles left to run; None: all of
    ``request.states``) from its ``slot``-th."""
    only = getattr(request, "only", None)
    if only is None:
        return list(range(slot, len(request.states), request.n_slots))
    return list(only[slot::request.n_slots])


def lone_share(engine, slot: int, request, policy) -> list[int] | None:
    """The particles worker ``slot`` runs one at a time (:func:`slot_indices`), or None when
    it runs its share in batched worlds (:func:`batched_first_events`): one at a time when
    ``request.batch_size`` is 1, when the scene, ``policy`` or guard needs the lone path
    (:func:`~residualsim.sim.batch.batch_unsupported`), or when the work is split in advance
    and this slot's share is empty."""
    from residualsim.sim.batch import batch_unsupported

    indices = slot_indices(slot, request)
    if request.batch_size == 1 or (request.claims is None and not indices) or \
            batch_unsupported(engine.scene, policy, request.guard) is not None:
        return indices
    return None


def map_shared(workers, function, request) -> list:
    """``workers.map(function, request)`` with the particles claimed as the workers free up
    (``request.claims``) when the workers are local processes, more than one, and a
    temporary file can be made (else split in advance); then any
    particle no chunk came back with (its worker died after taking it) run again, split in
    advance (``request.only``); should two workers have claimed the same particle (a
    temporary directory on a file system whose appends are not atomic), the whole step
    again, split in advance. ``function`` returns chunks whose first item is the indices of
    the particles it ran."""
    from residualsim.parallel.claims import WorkClaims

    n, claims = len(request.states), None
    if workers.n_workers > 1 and workers.backend.name == "local" and n > 0:
        try:
            claims = WorkClaims(n, request.n_slots)
        except OSError:  # no writable temporary directory: split in advance
            claims = None
    if claims is None:
        chunks = workers.map(function, request)
    else:
        with claims:
            chunks = workers.map(function, dataclasses.replace(request, claims=claims))
    counts = np.bincount(np.concatenate([np.asarray(chunk[0], dtype=np.int64)
                                         for chunk in chunks] + [np.zeros(0, np.int64)]),
                         minlength=n)
    if claims is not None and counts.max(initial=0) > 1:  # a file system that appends
        return workers.map(function, request)  # without the atomicity POSIX promises
    if not counts.all():
        left = tuple(np.flatnonzero(counts == 0).tolist())
        chunks = chunks + workers.map(function, dataclasses.replace(request, claims=None,
                                                                     only=left))
    return chunks


def batched_first_events(engine, slot: int, request, policy, seeds) -> tuple[list, object]:
    """Worker side: the first events (:func:`~residualsim.sim.batch.first_events`, with
    ``policy`` and ``seeds`` for all of ``request.states`` or None) of the particles worker
    ``slot`` runs, taken from ``request.claims`` as its copies free up or split in advance
    (:func:`slot_indices`); the engine set to ``request.params`` first. Returns (the
    particles' indices, their :class:`~residualsim.sim.batch.FirstEvents`)."""
    from residualsim.sim.batch import first_events

    if engine.params != request.params:
        engine.set_params(request.params)
    claims = request.claims
    if claims is None:
        indices = slot_indices(slot, request)
        runs = first_events(engine, request.states[indices], request.max_steps, policy,
                            None if seeds is None else [seeds[i] for i in indices],
                            request.guard, request.batch_size)
        return indices, runs
    try:
        runs = first_events(engine, request.states, request.max_steps, policy, seeds,
                            request.guard, request.batch_size, claims=claims)
    finally:
        claims.close()
    return runs.indices.tolist(), runs
