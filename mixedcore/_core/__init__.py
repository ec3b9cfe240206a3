"""The compiled core of mixedcore (see setup.py and docs/dispatch.md)."""
