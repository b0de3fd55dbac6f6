"""A training package run as ``python -m v_pkg.train`` or through ``runpy`` from
``python -c``: its relative imports work only as a package module."""
