"""Live charts: Qt-free decimation and smoothing, and pyqtgraph widgets built on them.

``decimation`` and ``smoothing`` import only numpy (view models use them); the chart
widgets live in ``chart`` and ``grid``. This ``__init__`` imports nothing, so that
importing the numpy parts never drags Qt in.
"""
