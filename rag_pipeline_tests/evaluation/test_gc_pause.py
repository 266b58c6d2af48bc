"""evaluation/gc_pause.py: the objects alive at a block's start are frozen, the first generation's threshold is
raised, and both come back after the outermost block, also when it raises."""

from __future__ import annotations

import gc

import pytest

from rag_pipeline.evaluation import gc_pause


def test_a_block_freezes_and_raises_the_threshold_and_the_outermost_restores():
    before = gc.get_threshold()
    kept = [object() for _ in range(10)]  # noqa: F841 - alive across the block
    with gc_pause.frozen():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == max(gc_pause.ALLOCATIONS, before[0])
        with gc_pause.frozen():
            pass
        assert gc.get_freeze_count() > 0, "an inner block leaves the outer one's state"
        assert gc.get_threshold()[0] == max(gc_pause.ALLOCATIONS, before[0])
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_an_error_in_the_block_restores_too():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), gc_pause.frozen():
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_cyclic_garbage_made_in_the_block_is_collected_after_it():
    class Node:
        pass

    with gc_pause.frozen():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
    gc.collect()
    assert not any(type(o) is Node for o in gc.get_objects())
