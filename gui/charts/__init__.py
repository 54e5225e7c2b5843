"""Live charts: Qt-free smoothing, tick labels and readout rows, and pyqtgraph widgets built
on them and on the series of the view models (``gui.models.series``: storage and min/max
decimation).

``smoothing`` imports only numpy, ``ticks`` and ``readout`` only the standard library; the widgets live in ``axis``, ``curves``, ``chart``,
``legend`` and ``grid``. This ``__init__`` imports nothing, so that importing the Qt-free
parts never drags Qt in.
"""
