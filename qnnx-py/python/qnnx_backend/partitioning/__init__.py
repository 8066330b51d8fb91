"""Graphs that run partly on QNN: ``plan`` (what a device runs, the partitioner), ``callcost``
(the ``partition_cost`` rule's two numbers) and ``split`` (a split graph compiled, loaded and
called)."""
