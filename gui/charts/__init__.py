"""Live charts: Qt-free decimation, smoothing, tick labels and readout rows, and pyqtgraph
widgets built on them.

``decimation`` and ``smoothing`` import only numpy (view models use them), ``ticks`` and
``readout`` only the standard library; the widgets live in ``axis``, ``curves``, ``chart``,
``legend`` and ``grid``. This ``__init__`` imports nothing, so that importing the Qt-free
parts never drags Qt in.
"""
