"""The ``feedline`` command line (see :mod:`feedline.cli.main`)."""
