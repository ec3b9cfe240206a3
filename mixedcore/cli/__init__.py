"""The command line, ``python -m mixedcore info | demo | bench | predict | report``.

``main.main`` parses the arguments and dispatches; each command's work is a module of its own:
``info``, ``demo``, ``bench``, ``predict``, ``report`` (``common``: what predict and report
share).
"""
